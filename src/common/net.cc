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

}  // namespace trun
