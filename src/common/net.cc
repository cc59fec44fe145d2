#include "common/net.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trun {

std::string FqdnHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  std::string best = name;
  if (getaddrinfo(name, nullptr, &hints, &res) == 0 && res != nullptr) {
    // Python asks for the address's names and takes the first with a dot.
    char host[NI_MAXHOST];
    if (getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof host, nullptr, 0, NI_NAMEREQD) ==
        0) {
      best = host;
    }
    if (best.find('.') == std::string::npos && res->ai_canonname &&
        std::strchr(res->ai_canonname, '.')) {
      best = res->ai_canonname;
    }
    freeaddrinfo(res);
  }
  return best;
}

Result<PortReservation> PortReservation::Reserve(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IOError("cannot reserve port " + std::to_string(port) + ": " +
                           std::strerror(err) +
                           (err == EADDRINUSE ? " (another process holds it; pick another "
                                                "--master-port or leave it out to get a free one)"
                                              : ""));
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return PortReservation(fd, ntohs(addr.sin_port));
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace trun
