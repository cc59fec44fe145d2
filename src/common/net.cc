#include "common/net.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace trun {

namespace {

std::string LookUpFqdn() {
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

}  // namespace

std::string FqdnHostname() {
  // Asked once per process: each lookup reads nsswitch.conf, /etc/hosts and
  // perhaps DNS, and a host's name does not change under a running job.
  static const std::string fqdn = LookUpFqdn();
  return fqdn;
}

bool IsLocalAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool local = false;
  for (addrinfo* a = res; a && !local; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // Port 0 in the resolved address: binding succeeds only on an own address.
    local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  freeaddrinfo(res);
  return local;
}

asio::ip::address Unmapped(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  return a;
}

Result<AddressList> ResolveWithin(const std::string& host, const std::string& port,
                                  std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) == 0)
    return AddressList(found, freeaddrinfo);
  // A lookup that outlives the caller keeps this alive and frees its own answer.
  struct Lookup {
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    bool abandoned = false;
    int rc = 0;
    addrinfo* found = nullptr;
  };
  auto lookup = std::make_shared<Lookup>();
  hints.ai_flags = 0;
  std::thread([lookup, host, port, hints] {
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    std::lock_guard lock(lookup->mu);
    if (lookup->abandoned) {
      if (rc == 0) freeaddrinfo(res);
      return;
    }
    lookup->rc = rc;
    lookup->found = res;
    lookup->done = true;
    lookup->done_cv.notify_one();
  }).detach();
  std::unique_lock lock(lookup->mu);
  if (!lookup->done_cv.wait_until(lock, deadline, [&] { return lookup->done; })) {
    lookup->abandoned = true;
    return Status::Timeout(fmt::format("{}: the name was not resolved in time", host));
  }
  if (lookup->rc != 0) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot resolve the host: {}", host, gai_strerror(lookup->rc)));
  }
  return AddressList(lookup->found, freeaddrinfo);
}

std::string SocketEndpoint(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return "";
  asio::ip::tcp::endpoint e;
  if (len > e.capacity()) return "";
  std::memcpy(e.data(), &ss, len);
  e.resize(len);
  const auto a = Unmapped(e.address());
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), e.port())
                   : fmt::format("{}:{}", a.to_string(), e.port());
}

Status ListenTcp(asio::ip::tcp::acceptor& acceptor, const std::string& host, int port,
                 std::string_view what) {
  using asio::ip::tcp;
  std::vector<std::pair<tcp::endpoint, bool>> candidates;  // endpoint, dual stack
  const auto p = static_cast<uint16_t>(port);
  if (host.empty() || host == "::") {
    candidates = {{tcp::endpoint(asio::ip::address_v6::any(), p), true},
                  {tcp::endpoint(asio::ip::address_v4::any(), p), false}};
  } else {
    std::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec)
      return Status::InvalidArgument(fmt::format("{}: '{}' is not an IP address", what, host));
    candidates = {{tcp::endpoint(addr, p), false}};
  }
  std::error_code ec;
  for (const auto& [ep, dual] : candidates) {
    acceptor.close(ec);
    ec.clear();
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && dual) acceptor.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) return Status::OK();
  }
  return Status::IOError(fmt::format("{}: cannot listen on {}:{}: {}", what,
                                     host.empty() ? "*" : host, port, ec.message()));
}

}  // namespace trun
