#include "store/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "store/encode.h"
#include "store/wire_format.h"

namespace trun::store {
namespace {

using Clock = std::chrono::steady_clock;

void PutKeys(std::string& o, const std::vector<std::string>& keys) {
  PutI64(o, static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) PutBytes(o, k);
}

// One connection attempt to any of host's addresses, each bounded by the
// time left; -1 if none answered.
int TryConnect(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    // Non-blocking, so that an unreachable host costs the time left, not
    // the kernel's two minutes of SYN retries.
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!ok && errno == EINPROGRESS) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{fd, POLLOUT, 0};
      int r;
      do {
        r = ::poll(&pfd, 1, static_cast<int>(std::max<long long>(left.count(), 1)));
      } while (r < 0 && errno == EINTR);
      int err = 0;
      socklen_t len = sizeof err;
      ok = r == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    if (ok) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      break;
    }
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

Result<StoreClient> StoreClient::Connect(const std::string& host, int port,
                                         Duration connect_timeout, Duration timeout) {
  auto deadline = Clock::now() + connect_timeout;
  // Seeded at the first retry only: std::random_device's set-up runs CPUID,
  // which a virtual machine traps (tens of microseconds, on every connect
  // of every agent otherwise).
  std::optional<std::minstd_rand> rng;
  Duration backoff(100);
  Status last = Status::Timeout("no answer");
  // Handshakes in a row that the server cut short: one is a store that
  // went away (a restart), several a process that is no TCPStore of
  // protocol v2 (torch 1.13's own server resets at VALIDATE's bytes),
  // which retrying until the deadline would only hide.
  int cut_short = 0;
  while (true) {
    int fd = TryConnect(host, port, deadline);
    if (fd >= 0) {
      // The handshake is part of connecting: bounded by what is left of the
      // connect timeout (at least a second), not by the calls' timeout, which
      // may be "forever". A listening socket whose server loop is stuck (or
      // is the caller's own, busy joining the caller) accepts connections in
      // the kernel but never answers.
      auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
      StoreClient c(fd, std::min(timeout, std::max(left, Duration(1000))));
      c.SetSendTimeout();
      // VALIDATE and the PING that proves a live server in one send.
      std::string hello;
      PutU8(hello, v2::kValidate);
      PutU32(hello, kValidationMagic);
      last = c.PingAfter(std::move(hello));
      if (last.ok()) {
        c.timeout_ = timeout;
        c.SetSendTimeout();
        return c;
      }
      if (last.code() == StatusCode::kTimeout) {
        cut_short = 0;
      } else if (++cut_short >= kMaxCutShort) {
        return Status::PermissionDenied(fmt::format(
            "{}:{} closed {} connections in a row at their first bytes: it is no store that "
            "speaks TCPStore's protocol v2 (torch 1.13's own TCPStore server does that): another "
            "process holds the port?",
            host, port, kMaxCutShort));
      }
      // A server that accepted and went away (a restart): try again.
    } else {
      cut_short = 0;
      last = Status::IOError("connection refused or unreachable");
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout(fmt::format("store: cannot connect to {}:{} within {} ms: {}", host,
                                         port, connect_timeout.count(), last.message()));
    }
    if (!rng) rng.emplace(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    auto sleep = std::chrono::duration_cast<Duration>(backoff * jitter(*rng));
    std::this_thread::sleep_for(
        std::min<Duration>(sleep, std::chrono::duration_cast<Duration>(deadline - Clock::now())));
    backoff = std::min<Duration>(backoff * 2, Duration(2000));
  }
}

// A send that cannot progress (a server that stopped reading) fails after
// the timeout instead of blocking forever.
void StoreClient::SetTimeout(Duration timeout) {
  timeout_ = timeout;
  SetSendTimeout();
}

void StoreClient::SetSendTimeout() {
  timeval tv{static_cast<time_t>(timeout_.count() / 1000),
             static_cast<suseconds_t>(timeout_.count() % 1000 * 1000)};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreClient::Abort() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string StoreClient::LocalAddress() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
      ::inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof buf);
    } else {
      ::inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
    }
  }
  return buf;
}

Status StoreClient::SendAll(const std::string& bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::send(fd_, p, left, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Status::Timeout("store: the server is not reading");
    }
    if (n <= 0) return Status::FromErrno("store: send", errno);
    p += n;
    left -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status StoreClient::RecvAll(void* buf, size_t n, Duration timeout) {
  auto deadline = Clock::now() + timeout;
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    // A reply's bytes are often here already (a value's after its length):
    // poll only when the socket has nothing yet.
    ssize_t got = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now()).count();
      if (left <= 0) return Status::Timeout("store: no reply");
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (r == 0) return Status::Timeout("store: no reply");
      continue;  // readable, or EINTR: read again
    }
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return Status::IOError("store: connection closed by the server");
    if (got < 0) return Status::FromErrno("store: recv", errno);
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::OK();
}

Result<uint8_t> StoreClient::RecvU8(Duration timeout) {
  uint8_t v;
  TRUN_RETURN_IF_ERROR(RecvAll(&v, 1, timeout));
  return v;
}

Result<int64_t> StoreClient::RecvI64() {
  int64_t v;
  TRUN_RETURN_IF_ERROR(RecvAll(&v, 8, timeout_));
  return v;
}

Result<std::string> StoreClient::RecvBytes() {
  auto len = RecvI64();
  if (!len.ok()) return len.status();
  if (*len < 0 || static_cast<uint64_t>(*len) > kDefaultMaxValueBytes * 16) {
    return Status::IOError("store: reply length out of range");
  }
  std::string s(static_cast<size_t>(*len), '\0');
  TRUN_RETURN_IF_ERROR(RecvAll(s.data(), s.size(), timeout_));
  return s;
}

// SET, APPEND and QUEUE_PUSH: the opcode, the key, the value; no reply.
Status StoreClient::SendKeyValue(uint8_t op, const std::string& key, const std::string& value) {
  std::string o;
  PutU8(o, op);
  PutBytes(o, key);
  PutBytes(o, value);
  return SendAll(o);
}

Status StoreClient::Set(const std::string& key, const std::string& value) {
  return SendKeyValue(v2::kSet, key, value);
}

Result<std::string> StoreClient::Get(const std::string& key) { return WaitAndGet(key, timeout_); }

Result<std::string> StoreClient::WaitAndGet(const std::string& key, Duration timeout) {
  TRUN_RETURN_IF_ERROR(Wait({key}, timeout));
  std::string o;
  PutU8(o, v2::kGet);
  PutBytes(o, key);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return RecvBytes();
}

Result<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  std::string o;
  PutU8(o, v2::kAdd);
  PutBytes(o, key);
  PutI64(o, delta);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return RecvI64();
}

Result<std::string> StoreClient::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired) {
  std::string o;
  PutU8(o, v2::kCompareSet);
  PutBytes(o, key);
  PutBytes(o, expected);
  PutBytes(o, desired);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return RecvBytes();
}

Result<bool> StoreClient::Check(const std::vector<std::string>& keys) {
  std::string o;
  PutU8(o, v2::kCheck);
  PutKeys(o, keys);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  auto r = RecvU8(timeout_);
  if (!r.ok()) return r.status();
  return *r == kCheckReady;
}

Status StoreClient::Wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  std::string o;
  PutU8(o, v2::kWait);
  PutKeys(o, keys);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return AwaitStopWaiting(timeout.value_or(timeout_),
                          "wait for " + std::to_string(keys.size()) + " key(s)");
}

Status StoreClient::AwaitStopWaiting(Duration timeout, const std::string& what) {
  auto r = RecvU8(timeout);
  if (r.ok()) return Status::OK();
  if (r.status().code() != StatusCode::kTimeout) return r.status();
  // Cancel, then read to the cancel's reply: a STOP_WAITING may come first.
  std::string cancel;
  PutU8(cancel, v2::kCancelWait);
  TRUN_RETURN_IF_ERROR(SendAll(cancel));
  while (true) {
    auto b = RecvU8(timeout_);
    if (!b.ok()) return b.status();
    if (*b == kWaitCanceled) break;
  }
  return Status::Timeout("store: " + what + " timed out");
}

Result<bool> StoreClient::DeleteKey(const std::string& key) {
  std::string o;
  PutU8(o, v2::kDeleteKey);
  PutBytes(o, key);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  auto r = RecvI64();
  if (!r.ok()) return r.status();
  return *r == 1;
}

Result<int64_t> StoreClient::NumKeys() {
  std::string o;
  PutU8(o, v2::kGetNumKeys);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return RecvI64();
}

Status StoreClient::Append(const std::string& key, const std::string& value) {
  return SendKeyValue(v2::kAppend, key, value);
}

Result<std::vector<std::string>> StoreClient::MultiGet(const std::vector<std::string>& keys) {
  std::string o;
  PutU8(o, v2::kMultiGet);
  PutKeys(o, keys);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  std::vector<std::string> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = RecvBytes();
    if (!v.ok()) return v.status();
    out.push_back(std::move(*v));
  }
  return out;
}

Status StoreClient::MultiSet(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::string o;
  PutU8(o, v2::kMultiSet);
  PutI64(o, static_cast<int64_t>(kvs.size()));
  for (const auto& [k, v] : kvs) {
    PutBytes(o, k);
    PutBytes(o, v);
  }
  return SendAll(o);
}

Status StoreClient::Ping() { return PingAfter(""); }

Status StoreClient::PingAfter(std::string o) {
  uint32_t nonce = static_cast<uint32_t>(::getpid()) ^ 0x5A5A5A5Au;
  PutU8(o, v2::kPing);
  PutU32(o, nonce);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  uint32_t echo = 0;
  TRUN_RETURN_IF_ERROR(RecvAll(&echo, 4, timeout_));
  if (echo != nonce) return Status::IOError("store: PING answered with the wrong nonce");
  return Status::OK();
}

Result<std::vector<std::string>> StoreClient::ListKeys() {
  std::string o;
  PutU8(o, v2::kListKeys);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  auto n = RecvI64();
  if (!n.ok()) return n.status();
  if (*n < 0) return Status::IOError("store: LIST_KEYS answered a negative count");
  std::vector<std::string> keys;
  for (int64_t i = 0; i < *n; ++i) {
    auto k = RecvBytes();
    if (!k.ok()) return k.status();
    keys.push_back(std::move(*k));
  }
  return keys;
}

Status StoreClient::Barrier(const std::string& key, int64_t world_size,
                            std::optional<Duration> timeout) {
  std::string o;
  PutU8(o, v2::kBarrier);
  PutBytes(o, key);
  PutI64(o, world_size);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return AwaitStopWaiting(timeout.value_or(timeout_), "barrier '" + key + "'");
}

Status StoreClient::QueuePush(const std::string& key, const std::string& value) {
  return SendKeyValue(v2::kQueuePush, key, value);
}

Result<std::string> StoreClient::QueuePop(const std::string& key, bool block) {
  if (block) TRUN_RETURN_IF_ERROR(Wait({key}));
  std::string o;
  PutU8(o, v2::kQueuePop);
  PutBytes(o, key);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  auto n = RecvI64();
  if (!n.ok()) return n.status();
  if (*n <= 0) return Status::NotFound("store: queue '" + key + "' is empty");
  return RecvBytes();
}

Result<int64_t> StoreClient::QueueLen(const std::string& key) {
  std::string o;
  PutU8(o, v2::kQueueLen);
  PutBytes(o, key);
  TRUN_RETURN_IF_ERROR(SendAll(o));
  return RecvI64();
}

std::vector<std::string> PrefixStore::Keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(Key(k));
  return full;
}

Status PrefixStore::MultiSet(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::vector<std::pair<std::string, std::string>> full;
  full.reserve(kvs.size());
  for (const auto& [k, v] : kvs) full.emplace_back(Key(k), v);
  return client_.MultiSet(full);
}

}  // namespace trun::store
