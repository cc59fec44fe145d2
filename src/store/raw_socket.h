// RawSocket: a blocking TCP client that speaks raw bytes, for the store's
// tests: golden replies, hostile clients, a relay's link frames.
//
// Thread-safety: one thread per socket.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

namespace trun::store::golden {

class RawSocket {
 public:
  // Connects to the loopback address's `port`.
  explicit RawSocket(int port, bool v6 = false) {
    if (v6) {
      fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      a.sin6_addr = in6addr_loopback;
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    } else {
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
  }
  // A socket connected already (a client's, handed over); closed with this.
  static RawSocket Adopt(int fd) { return RawSocket(fd, 0); }
  RawSocket(RawSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)), connected_(o.connected_) {}
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  // Half-closes: the server reads EOF after what was sent.
  void EndWrites() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset (SO_LINGER 0): the server's next write fails.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(std::exchange(fd_, -1));
  }
  // Shrinks the kernel's receive buffer, so that the server's writes to a
  // client that reads slowly meet a full socket.
  void SmallReceiveBuffer() {
    int n = 64 * 1024;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &n, sizeof n);
  }
  bool Send(const std::string& b) {
    return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  // Exactly n bytes, or what came before EOF or the timeout.
  std::string Recv(size_t n, int timeout_ms = 5000) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) != 1) break;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(n - out.size(), sizeof buf), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  // True when the server closed the connection (EOF or reset) within the
  // timeout, reading and discarding anything before it.
  bool Closed(int timeout_ms = 5000) {
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) != 1) return false;
      char buf[4096];
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
  }

 private:
  RawSocket(int fd, int) : fd_(fd), connected_(fd >= 0) {}
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace trun::store::golden
