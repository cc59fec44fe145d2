// store_loadgen: drives a TCPStore server over the wire, with many
// connections from one thread, to measure what a server costs and how it
// scales. It speaks protocol v1 (torch 1.10 to 2.1), so the same tool drives
// trun's store and torch 1.13's own server (TCPStore(is_master=True));
// --protocol v2 speaks torch 2.2+'s numbering, after a VALIDATE on every
// connection, for torch 2.x's own server, which drops a client without it.
// bench/run.py runs it for `make bench`; docs in bench/RESULTS.md.
//
//   store_loadgen load    --port P --conns 10000 --seconds 10 [--rate R]
//   store_loadgen barrier --port P --clients 1000 [--repeat 5] [--arrival-ms MS]
//   store_loadgen ops     --port P --clients 64 --seconds 3
//
// load: opens --conns connections, at most --connect-concurrency connecting
// at once (so the listen backlog is not what gets measured), then each sends
// SET, GET and ADD in turn, paced so that all of them together send --rate
// requests per second (0: each sends its next request as soon as the last is
// answered), and reports latency percentiles per operation. SET has no reply
// in the protocol: a CHECK of its key goes right behind it, and its latency
// is the CHECK's answer (replies come in order, so the SET was handled).
//
// barrier: --clients clients each ADD 1 to a counter; the one whose ADD
// returns the count SETs a key, and every client WAITs for that key once
// its ADD is answered. Timed from the first ADD sent to the last WAIT
// answered; --repeat rounds on the same connections, fresh keys each. The
// ADDs go out all at once, or spread evenly over --arrival-ms. A torch 1.13
// client holds a second, idle "callback" connection, which a polling server
// pays for; --conns-per-client 2 (the default) does the same.
//
// ops: --clients clients each SET a key and GET it back (sent together, one
// round trip) in a closed loop; reports set+get operations per second.
//
// Requests go out as torch 1.13's client writes them: the opcode byte alone,
// then the rest (--whole-requests: one write each). Every connection first
// sends GETNUMKEYS and waits for the answer, so the server has accepted it
// before anything is measured. Replies are checked (a GET returns what was
// set, CHECK answers READY, ADD counts); a wrong reply or a dropped
// connection ends the run with exit status 1 and says which. With
// --server-pid, the server's CPU time (and for load, its RSS growth over the
// idle connections and its CPU while they open) is read from /proc. --json
// prints one JSON object (load's has this process's CPU while they open).
//
// --source-hosts K binds the connections, in turn, to K loopback addresses
// (127.1.0.1, 127.1.0.2, ...; IPv4 only) before they connect, as a real
// job's ranks come from many hosts. From one source address, every connect
// is given an ephemeral port of that address: past about 10,000 of them
// open, this machine's network stack takes ever longer to find a free one
// (19,000 took 5 s, 10,000 0.7 s), which measures the client's side, not
// the server.
//
// Thread-safety: one thread; nothing shared.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "store/encode.h"
#include "store/wire_format.h"

namespace trun::store {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMs = 1000000;  // nanoseconds
using nlohmann::json;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "store_loadgen: %s\n", why.c_str());
  std::exit(1);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The opcodes sent, by protocol generation (--protocol); set once in Main.
struct Opcodes {
  uint8_t set, get, add, check, wait, num_keys;
  bool validate;  // v2: VALIDATE first on every connection
};
constexpr Opcodes kV1Opcodes{v1::kSet,  v1::kGet,        v1::kAdd, v1::kCheck,
                             v1::kWait, v1::kGetNumKeys, false};
constexpr Opcodes kV2Opcodes{v2::kSet,  v2::kGet,        v2::kAdd, v2::kCheck,
                             v2::kWait, v2::kGetNumKeys, true};
Opcodes g_op = kV1Opcodes;

// Requests, laid out as docs/store-protocol.md gives them.
std::string KeyRequest(uint8_t op, std::string_view key) {
  std::string o;
  PutU8(o, op);
  PutBytes(o, key);
  return o;
}
std::string SetRequest(std::string_view key, std::string_view value) {
  std::string o = KeyRequest(g_op.set, key);
  PutBytes(o, value);
  return o;
}
std::string AddRequest(std::string_view key, int64_t delta) {
  std::string o = KeyRequest(g_op.add, key);
  PutI64(o, delta);
  return o;
}
// CHECK or WAIT of one key.
std::string KeysRequest(uint8_t op, std::string_view key) {
  std::string o;
  PutU8(o, op);
  PutI64(o, 1);
  PutBytes(o, key);
  return o;
}

// What a request's reply looks like, and what the request was for.
enum class ReplyShape { kU8, kI64, kBytes };
enum class Tag { kHello, kSet, kGet, kAdd, kWait };

struct Expect {
  ReplyShape shape;
  Tag tag;
  int64_t sent_ns;
};

struct Reply {
  uint8_t u8 = 0;
  int64_t i64 = 0;
  std::string_view bytes;
};

struct Conn {
  int fd = -1;
  size_t index = 0;
  bool connecting = true;
  bool want_out = false;
  std::string in;     // reply bytes not yet parsed
  size_t in_off = 0;  // of which consumed
  std::string out;    // request bytes the socket did not take yet
  std::deque<Expect> expects;
};

// The epoll loop and the connections; the modes below drive it through
// on_reply.
class Generator {
 public:
  Generator(std::string where, sockaddr_storage addr, socklen_t addr_len, bool whole_requests,
            size_t source_hosts)
      : where_(std::move(where)),
        addr_(addr),
        addr_len_(addr_len),
        whole_requests_(whole_requests),
        source_hosts_(source_hosts) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) Die(fmt::format("epoll_create1: {}", std::strerror(errno)));
  }
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  // Closes with a reset: the ports it used are free at once instead of
  // lingering in TIME_WAIT for a minute, so that runs of 10,000
  // connections can follow each other without running out of them.
  ~Generator() {
    linger reset{1, 0};
    for (auto& c : conns_) {
      if (c->fd < 0) continue;
      setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      close(c->fd);
    }
    close(epfd_);
  }

  std::vector<std::unique_ptr<Conn>>& conns() { return conns_; }
  std::function<void(Conn&, const Expect&, const Reply&)> on_reply;

  // Opens n more connections, at most `concurrency` of them connecting or
  // waiting for their first answer at any time; returns when all are open.
  void Open(size_t n, size_t concurrency) {
    size_t first = conns_.size(), started = first, end = first + n;
    auto saved = std::move(on_reply);
    on_reply = [&](Conn&, const Expect& e, const Reply&) {
      if (e.tag != Tag::kHello) Die("unexpected reply while connecting");
      ++opened_;
    };
    while (opened_ < end) {
      while (started < end && started - opened_ < concurrency) StartConnect(started++);
      Poll(kMs * 1000);
    }
    on_reply = std::move(saved);
  }

  // Sends requests, and expects their replies in order. As torch 1.13's
  // client, each request goes out in two writes, its opcode byte alone and
  // then the rest (a server that reads a request with blocking reads of one
  // field after another waits between the two); with whole_requests, all of
  // them in one write.
  void Send(Conn& c, std::initializer_list<std::string_view> requests,
            std::initializer_list<Expect> expects) {
    for (const auto& e : expects) c.expects.push_back(e);
    if (whole_requests_) {
      std::string all;
      for (auto r : requests) all.append(r);
      return Write(c, all);
    }
    for (auto r : requests) {
      Write(c, r.substr(0, 1));
      Write(c, r.substr(1));
    }
  }
  // Waits up to timeout_ns for events and handles them.
  void Poll(int64_t timeout_ns) {
    epoll_event events[512];
    timespec ts{timeout_ns / 1000000000, timeout_ns % 1000000000};
    int n = epoll_pwait2(epfd_, events, 512, &ts, nullptr);
    if (n < 0 && errno != EINTR) Die(fmt::format("epoll_wait: {}", std::strerror(errno)));
    for (int i = 0; i < n; ++i) {
      Conn& c = *conns_[events[i].data.u64];
      if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) Writable(c);
      if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) Readable(c);
    }
  }

  // Polls until done() holds or `deadline_ns` passes (then dies: a server
  // that never answers must not hang the benchmark).
  void RunUntil(const std::function<bool()>& done, int64_t deadline_ns, const char* what) {
    while (!done()) {
      if (NowNs() > deadline_ns) Die(fmt::format("timed out waiting for {}", what));
      Poll(kMs * 100);
    }
  }

 private:
  void StartConnect(size_t i) {
    auto c = std::make_unique<Conn>();
    c->index = i;
    c->fd = socket(addr_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      Die(fmt::format("socket() for connection {}: {} (open-file limit?)", i,
                      std::strerror(errno)));
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (source_hosts_ > 0) BindSource(c->fd, i % source_hosts_);
    if (connect(c->fd, reinterpret_cast<sockaddr*>(&addr_), addr_len_) != 0 &&
        errno != EINPROGRESS) {
      Die(fmt::format("cannot connect to {} (connection {}): {}", where_, i, std::strerror(errno)));
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      Die(fmt::format("epoll_ctl: {}", std::strerror(errno)));
    }
    c->want_out = true;
    conns_.push_back(std::move(c));
  }

  // Host h's address, 127.1.0.0 + h + 1; its port is chosen at connect
  // (IP_BIND_ADDRESS_NO_PORT), among that address's ports only.
  void BindSource(int fd, size_t h) {
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl((127u << 24 | 1u << 16) + static_cast<uint32_t>(h) + 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      Die(fmt::format("bind to source host {}: {}", h, std::strerror(errno)));
    }
  }

  void Write(Conn& c, std::string_view bytes) {
    if (c.out.empty()) {
      ssize_t n = send(c.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) Lost(c, std::strerror(errno));
      size_t sent = n < 0 ? 0 : static_cast<size_t>(n);
      if (sent == bytes.size()) return;
      bytes.remove_prefix(sent);
    }
    c.out.append(bytes);
    WantOut(c, true);
  }

  void WantOut(Conn& c, bool want) {
    if (c.want_out == want) return;
    c.want_out = want;
    epoll_event ev{};
    ev.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN;
    ev.data.u64 = c.index;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  [[noreturn]] void Lost(Conn& c, const std::string& why) {
    Die(fmt::format("connection {} lost after {} connections opened: {}", c.index, opened_, why));
  }

  void Writable(Conn& c) {
    if (c.connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        Die(fmt::format("cannot connect to {} (connection {}): {}", where_, c.index,
                        std::strerror(err)));
      }
      c.connecting = false;
      WantOut(c, false);
      std::string validate, hello;
      PutU8(validate, v2::kValidate);
      PutU32(validate, kValidationMagic);
      PutU8(hello, g_op.num_keys);
      if (g_op.validate) {
        Send(c, {validate, hello}, {{ReplyShape::kI64, Tag::kHello, NowNs()}});
      } else {
        Send(c, {hello}, {{ReplyShape::kI64, Tag::kHello, NowNs()}});
      }
      return;
    }
    while (!c.out.empty()) {
      ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) return;
        Lost(c, std::strerror(errno));
      }
      c.out.erase(0, static_cast<size_t>(n));
    }
    WantOut(c, false);
  }

  void Readable(Conn& c) {
    if (c.connecting) return;  // its EPOLLOUT comes first
    ssize_t n = recv(c.fd, buf_, sizeof buf_, 0);
    if (n == 0) Lost(c, "the server closed it");
    if (n < 0) {
      if (errno == EAGAIN) return;
      Lost(c, std::strerror(errno));
    }
    c.in.append(buf_, static_cast<size_t>(n));
    while (!c.expects.empty()) {
      std::string_view rest(c.in.data() + c.in_off, c.in.size() - c.in_off);
      Reply r;
      size_t used = 0;
      switch (c.expects.front().shape) {
        case ReplyShape::kU8:
          if (rest.size() < 1) return Compact(c);
          r.u8 = static_cast<uint8_t>(rest[0]);
          used = 1;
          break;
        case ReplyShape::kI64:
          if (rest.size() < 8) return Compact(c);
          std::memcpy(&r.i64, rest.data(), 8);
          used = 8;
          break;
        case ReplyShape::kBytes: {
          uint64_t len;
          if (rest.size() < 8) return Compact(c);
          std::memcpy(&len, rest.data(), 8);
          if (rest.size() - 8 < len) return Compact(c);
          r.bytes = rest.substr(8, len);
          used = 8 + len;
          break;
        }
      }
      Expect e = c.expects.front();
      c.expects.pop_front();
      c.in_off += used;
      on_reply(c, e, r);
    }
    if (c.in_off < c.in.size()) Lost(c, "the server sent bytes nobody asked for");
    Compact(c);
  }

  static void Compact(Conn& c) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }

  std::string where_;  // host:port, for messages
  sockaddr_storage addr_;
  socklen_t addr_len_;
  bool whole_requests_;
  size_t source_hosts_;
  int epfd_;
  size_t opened_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;
  char buf_[64 * 1024];
};

// Percentiles of a set of latencies, in microseconds.
struct Summary {
  size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

Summary Summarize(std::vector<int64_t> ns) {
  Summary s;
  s.count = ns.size();
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) {
    size_t i = std::min(ns.size() - 1, static_cast<size_t>(q * static_cast<double>(ns.size())));
    return static_cast<double>(ns[i]) / 1e3;
  };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.p999 = at(0.999);
  s.max = static_cast<double>(ns.back()) / 1e3;
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

json ToJson(const Summary& s) {
  return {{"count", s.count}, {"p50_us", s.p50},   {"p90_us", s.p90},
          {"p99_us", s.p99},  {"p999_us", s.p999}, {"max_us", s.max}};
}

// The server's resident set, from /proc; 0 when it cannot be read.
int64_t RssKib(int pid) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("VmRSS:")) return std::stoll(line.substr(6));
  }
  return 0;
}

// Seconds a process's threads have run on a CPU, and have waited for one
// while runnable, from the scheduler's nanosecond counters
// (/proc/PID/task/*/schedstat). torch's server is a thread of the Python
// process that hosts it, trun's the main thread. Waiting shows a machine
// shared with other work: its latencies are then the machine's, not the
// server's.
struct Sched {
  double run = 0, wait = 0;
  Sched operator-(const Sched& o) const { return {run - o.run, wait - o.wait}; }
};

Sched SchedOf(int pid) {
  Sched s;
  if (pid == 0) return s;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream f(task.path() / "schedstat");
    int64_t run = 0, wait = 0;
    if (f >> run >> wait) {
      s.run += static_cast<double>(run) / 1e9;
      s.wait += static_cast<double>(wait) / 1e9;
    }
  }
  if (ec) Die(fmt::format("cannot read /proc/{}/task: {}", pid, ec.message()));
  return s;
}

struct Common {
  std::string host = "127.0.0.1";
  int port = 0;
  size_t connect_concurrency = 256;
  double timeout_s = 300;
  bool whole_requests = false;
  size_t source_hosts = 0;  // 0: the kernel's choice of source address
  int server_pid = 0;       // 0: not measured
  bool json = false;
};

// Resolves the numeric host and raises the open-file limit to fit `fds`.
Generator MakeGenerator(const Common& o, size_t fds) {
  sockaddr_storage addr{};
  socklen_t len;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, o.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(o.port));
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, o.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(o.port));
    len = sizeof *v6;
  } else {
    Die(fmt::format("--host '{}' is not an IP address", o.host));
  }
  if (o.source_hosts > 0 && v4->sin_family != AF_INET) {
    Die("--source-hosts needs an IPv4 --host (the sources are 127.1.0.0/16)");
  }
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t need = fds + 64;
  if (rl.rlim_cur < need) {
    if (rl.rlim_max < need) {
      Die(
          fmt::format("{} connections need {} open files; the hard limit is {} (raise it: "
                      "ulimit -Hn, or /etc/security/limits.conf)",
                      fds, need, rl.rlim_max));
    }
    rl.rlim_cur = need;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  return Generator(fmt::format("{}:{}", o.host, o.port), addr, len, o.whole_requests,
                   o.source_hosts);
}

// Every run uses keys of its own, so that runs against one server never
// see each other's counters.
const std::string& RunPrefix() {
  static const std::string prefix = fmt::format("/loadgen/{}.{}/", getpid(), NowNs());
  return prefix;
}

int64_t Deadline(const Common& o) { return NowNs() + static_cast<int64_t>(o.timeout_s * 1e9); }

struct LoadOptions {
  size_t conns = 10000;
  double seconds = 10;
  double warmup = 1;
  double rate = 0;
  size_t value_bytes = 32;
};

int RunLoad(const Common& o, const LoadOptions& lo) {
  Generator g = MakeGenerator(o, lo.conns);
  const int64_t rss0 = o.server_pid ? RssKib(o.server_pid) : 0;
  const Sched open_self0 = SchedOf(getpid()), open_server0 = SchedOf(o.server_pid);
  int64_t t0 = NowNs();
  g.Open(lo.conns, o.connect_concurrency);
  const double open_s = static_cast<double>(NowNs() - t0) / 1e9;
  // Who had the CPUs while they opened: this process and the server.
  const Sched open_self = SchedOf(getpid()) - open_self0;
  const Sched open_server = SchedOf(o.server_pid) - open_server0;
  const int64_t rss1 = o.server_pid ? RssKib(o.server_pid) : 0;
  if (o.server_pid && rss0 == 0) Die(fmt::format("cannot read /proc/{}/status", o.server_pid));

  // Each connection SETs its own key, GETs it and ADDs to one of 64
  // counters; connection i starts at op i % 3 so that all three are in
  // flight at every moment. Its key is set first, outside the measurement,
  // so that a GET never asks for a missing key (torch's server drops that
  // client).
  const std::string value(lo.value_bytes, 'v');
  auto key = [](size_t i) { return RunPrefix() + fmt::format("key{}", i); };
  auto counter = [](size_t i) { return RunPrefix() + fmt::format("counter{}", i % 64); };
  auto send_set = [&](Conn& c) {
    g.Send(c, {SetRequest(key(c.index), value), KeysRequest(g_op.check, key(c.index))},
           {{ReplyShape::kU8, Tag::kSet, NowNs()}});
  };
  size_t pending = 0;
  g.on_reply = [&](Conn&, const Expect&, const Reply& r) {
    if (r.u8 != kCheckReady) Die("CHECK after SET did not answer READY");
    --pending;
  };
  for (auto& c : g.conns()) {
    ++pending;
    send_set(*c);
  }
  g.RunUntil([&] { return pending == 0; }, Deadline(o), "the first SETs");

  std::vector<int64_t> lat[3];
  std::vector<size_t> step(lo.conns);
  bool measuring = false;
  size_t issued = 0, skipped = 0;
  auto send_next = [&](Conn& c) {
    switch ((c.index + step[c.index]++) % 3) {
      case 0:
        return send_set(c);
      case 1:
        return g.Send(c, {KeyRequest(g_op.get, key(c.index))},
                      {{ReplyShape::kBytes, Tag::kGet, NowNs()}});
      default:
        return g.Send(c, {AddRequest(counter(c.index), 1)},
                      {{ReplyShape::kI64, Tag::kAdd, NowNs()}});
    }
  };
  const bool closed_loop = lo.rate <= 0;
  g.on_reply = [&](Conn& c, const Expect& e, const Reply& r) {
    int64_t now = NowNs();
    int op = 0;
    switch (e.tag) {
      case Tag::kSet:
        if (r.u8 != kCheckReady) Die("CHECK after SET did not answer READY");
        op = 0;
        break;
      case Tag::kGet:
        if (r.bytes != value) Die(fmt::format("GET {} returned a wrong value", key(c.index)));
        op = 1;
        break;
      case Tag::kAdd:
        if (r.i64 <= 0) Die("ADD returned a count <= 0");
        op = 2;
        break;
      default:
        Die("unexpected reply");
    }
    if (measuring) lat[op].push_back(now - e.sent_ns);
    if (closed_loop) send_next(c);
  };

  const int64_t start = NowNs();
  const int64_t measure_from = start + static_cast<int64_t>(lo.warmup * 1e9);
  const int64_t end = measure_from + static_cast<int64_t>(lo.seconds * 1e9);
  Sched self0, server0;
  int64_t measured_from_ns = 0;
  if (closed_loop) {
    for (auto& c : g.conns()) send_next(*c);
  }
  // Paced: request number k goes to connection k % conns at start + k /
  // rate, so every connection sends once per conns / rate seconds. A
  // connection still waiting for its last answer skips its turn (counted).
  size_t next_conn = 0;
  while (true) {
    int64_t now = NowNs();
    if (now >= end) break;
    if (!measuring && now >= measure_from) {
      measuring = true;
      measured_from_ns = now;
      self0 = SchedOf(getpid());
      server0 = SchedOf(o.server_pid);
    }
    int64_t timeout_ns = 100 * kMs;
    if (!closed_loop) {
      while (true) {
        int64_t due = start + static_cast<int64_t>(static_cast<double>(issued) * 1e9 / lo.rate);
        if (due > now) {
          timeout_ns = due - now;
          break;
        }
        Conn& c = *g.conns()[next_conn];
        next_conn = (next_conn + 1) % lo.conns;
        ++issued;
        if (!c.expects.empty()) {
          if (measuring) ++skipped;
          continue;
        }
        send_next(c);
      }
    }
    g.Poll(timeout_ns);
  }
  const double wall = static_cast<double>(NowNs() - measured_from_ns) / 1e9;
  const Sched self = SchedOf(getpid()) - self0;
  const Sched server = SchedOf(o.server_pid) - server0;
  measuring = false;
  // The answers still owed are awaited (and checked) before closing.
  g.on_reply = [](Conn&, const Expect&, const Reply&) {};
  auto& conns = g.conns();
  g.RunUntil(
      [&] {
        return std::all_of(conns.begin(), conns.end(), [](auto& c) { return c->expects.empty(); });
      },
      Deadline(o), "the last answers");

  Summary s[3] = {Summarize(std::move(lat[0])), Summarize(std::move(lat[1])),
                  Summarize(std::move(lat[2]))};
  size_t total = s[0].count + s[1].count + s[2].count;
  double per_conn_kib =
      o.server_pid ? static_cast<double>(rss1 - rss0) / static_cast<double>(lo.conns) : 0;
  if (o.json) {
    json j = {{"mode", "load"},
              {"conns", lo.conns},
              {"open_seconds", open_s},
              {"open_loadgen_cpu_seconds", open_self.run},
              {"rate", lo.rate},
              {"seconds", wall},
              {"ops_per_second", static_cast<double>(total) / wall},
              {"skipped_turns", skipped},
              {"loadgen_cpu_fraction", self.run / wall},
              {"loadgen_wait_fraction", self.wait / wall},
              {"set", ToJson(s[0])},
              {"get", ToJson(s[1])},
              {"add", ToJson(s[2])}};
    if (o.server_pid) {
      j["server_rss_kib_before"] = rss0;
      j["server_rss_kib_open"] = rss1;
      j["server_kib_per_idle_conn"] = per_conn_kib;
      j["open_server_cpu_seconds"] = open_server.run;
      j["server_cpu_us_per_op"] = server.run * 1e6 / static_cast<double>(total);
      j["server_cpu_fraction"] = server.run / wall;
      j["server_wait_fraction"] = server.wait / wall;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%zu connections opened in %.2f s (at most %zu connecting at once)\n", lo.conns,
              open_s, o.connect_concurrency);
  if (o.server_pid) {
    std::printf("server RSS %.1f MiB idle -> %.1f MiB with them open: %.2f KiB per connection\n",
                static_cast<double>(rss0) / 1024, static_cast<double>(rss1) / 1024, per_conn_kib);
  }
  std::printf(
      "%s for %.1f s: %.0f ops/s; load generator busy %.0f%% of one core%s\n",
      closed_loop ? "closed loop" : fmt::format("paced at {:.0f} req/s", lo.rate).c_str(), wall,
      static_cast<double>(total) / wall, 100 * self.run / wall,
      skipped ? fmt::format("; {} turns skipped (answer still owed)", skipped).c_str() : "");
  if (o.server_pid) {
    std::printf(
        "server CPU %.1f us per request; it ran %.0f%% of the time and waited for a CPU %.0f%% "
        "(other work on this machine)\n",
        server.run * 1e6 / static_cast<double>(total), 100 * server.run / wall,
        100 * server.wait / wall);
  }
  std::printf("%-4s %9s %9s %9s %9s %9s %9s\n", "op", "count", "p50 us", "p90 us", "p99 us",
              "p99.9 us", "max us");
  const char* names[] = {"SET", "GET", "ADD"};
  for (int i = 0; i < 3; ++i) {
    std::printf("%-4s %9zu %9.0f %9.0f %9.0f %9.0f %9.0f\n", names[i], s[i].count, s[i].p50,
                s[i].p90, s[i].p99, s[i].p999, s[i].max);
  }
  return 0;
}

struct BarrierOptions {
  size_t clients = 1000;
  size_t repeat = 5;
  size_t conns_per_client = 2;
  double arrival_ms = 0;
};

int RunBarrier(const Common& o, const BarrierOptions& bo) {
  const size_t n = bo.clients;
  Generator g = MakeGenerator(o, n * bo.conns_per_client);
  // Client i talks on connection i; connections n.. are the idle ones.
  const int64_t open_start = NowNs();
  g.Open(n * bo.conns_per_client, o.connect_concurrency);
  const double open_s = static_cast<double>(NowNs() - open_start) / 1e9;
  // Per round: seconds until every ADD was sent, until the last arriver
  // saw the final count (all ADDs answered), and until every WAIT was.
  std::vector<double> rounds, sent_at, go_at, server_cpu;
  for (size_t round = 0; round < bo.repeat; ++round) {
    const std::string arrived = RunPrefix() + fmt::format("barrier{}/arrived", round);
    const std::string go = RunPrefix() + fmt::format("barrier{}/go", round);
    const std::string add = AddRequest(arrived, 1), set_go = SetRequest(go, "1"),
                      wait = KeysRequest(g_op.wait, go);
    size_t waited = 0, last = 0;
    int64_t t0 = 0, t_go = 0;
    g.on_reply = [&](Conn& c, const Expect& e, const Reply& r) {
      if (e.tag == Tag::kWait) {
        if (r.u8 != kWaitStopWaiting) Die("WAIT answered something but STOP_WAITING");
        ++waited;
        return;
      }
      if (r.i64 < 1 || r.i64 > static_cast<int64_t>(n)) {
        Die(fmt::format("ADD returned {} with {} clients", r.i64, n));
      }
      if (r.i64 == static_cast<int64_t>(n)) {
        ++last;
        t_go = NowNs();
        return g.Send(c, {set_go, wait}, {{ReplyShape::kU8, Tag::kWait, 0}});
      }
      g.Send(c, {wait}, {{ReplyShape::kU8, Tag::kWait, 0}});
    };
    const double cpu0 = SchedOf(o.server_pid).run;
    t0 = NowNs();
    // Client i arrives at t0 + i / n of the arrival window: all at once by
    // default, or spread as ranks that reach the barrier at different times.
    const double window_ns = bo.arrival_ms * 1e6;
    auto arrival = [&](size_t i) {
      return t0 + static_cast<int64_t>(window_ns * static_cast<double>(i) / static_cast<double>(n));
    };
    for (size_t i = 0; i < n;) {
      const int64_t now = NowNs();
      while (i < n && arrival(i) <= now) {
        g.Send(*g.conns()[i++], {add}, {{ReplyShape::kI64, Tag::kAdd, 0}});
      }
      if (i < n) g.Poll(arrival(i) - now);
    }
    sent_at.push_back(static_cast<double>(NowNs() - t0) / 1e9);
    g.RunUntil([&] { return waited == n; }, Deadline(o), "the barrier");
    rounds.push_back(static_cast<double>(NowNs() - t0) / 1e9);
    go_at.push_back(static_cast<double>(t_go - t0) / 1e9);
    server_cpu.push_back(SchedOf(o.server_pid).run - cpu0);
    if (last != 1) Die(fmt::format("{} clients saw the final count", last));
  }
  const double median = Median(rounds);
  if (o.json) {
    json j = {{"mode", "barrier"},
              {"clients", n},
              {"conns_per_client", bo.conns_per_client},
              {"open_seconds", open_s},
              {"rounds_seconds", rounds},
              {"adds_sent_seconds", sent_at},
              {"final_count_seconds", go_at},
              {"median_seconds", median}};
    if (o.server_pid) {
      j["server_cpu_seconds"] = server_cpu;
      j["median_server_cpu_seconds"] = Median(server_cpu);
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%zu connections opened in %.2f s (at most %zu connecting at once)\n",
              n * bo.conns_per_client, open_s, o.connect_concurrency);
  std::printf("barrier of %zu clients (%zu connections each): median %.1f ms\n", n,
              bo.conns_per_client, median * 1e3);
  std::printf("round  ADDs sent  final count  all WAITs answered  server CPU (ms)\n");
  for (size_t i = 0; i < rounds.size(); ++i) {
    std::printf("%5zu %10.1f %12.1f %19.1f %12s\n", i, sent_at[i] * 1e3, go_at[i] * 1e3,
                rounds[i] * 1e3,
                o.server_pid ? fmt::format("{:.1f}", server_cpu[i] * 1e3).c_str() : "-");
  }
  return 0;
}

struct OpsOptions {
  size_t clients = 1;
  double seconds = 3;
  double warmup = 0.5;
};

int RunOps(const Common& o, const OpsOptions& po) {
  Generator g = MakeGenerator(o, po.clients);
  g.Open(po.clients, o.connect_concurrency);
  const std::string value(32, 'v');
  std::vector<std::string> sets, gets;
  for (size_t i = 0; i < po.clients; ++i) {
    std::string key = RunPrefix() + fmt::format("ops{}", i);
    sets.push_back(SetRequest(key, value));
    gets.push_back(KeyRequest(g_op.get, key));
  }
  auto send = [&](Conn& c) {
    g.Send(c, {sets[c.index], gets[c.index]}, {{ReplyShape::kBytes, Tag::kGet, 0}});
  };
  bool measuring = false, stopping = false;
  size_t ops = 0;
  g.on_reply = [&](Conn& c, const Expect&, const Reply& r) {
    if (r.bytes != value) Die("GET returned a wrong value");
    if (measuring) ops += 2;
    if (!stopping) send(c);
  };
  const int64_t start = NowNs();
  for (auto& c : g.conns()) send(*c);
  const int64_t measure_from = start + static_cast<int64_t>(po.warmup * 1e9);
  const int64_t end = measure_from + static_cast<int64_t>(po.seconds * 1e9);
  int64_t from = 0;
  double server_cpu0 = 0;  // seconds
  while (NowNs() < end) {
    if (!measuring && NowNs() >= measure_from) {
      measuring = true;
      from = NowNs();
      server_cpu0 = SchedOf(o.server_pid).run;
    }
    g.Poll(kMs * 10);
  }
  const double wall = static_cast<double>(NowNs() - from) / 1e9;
  const double server_us_per_op =
      (SchedOf(o.server_pid).run - server_cpu0) * 1e6 / static_cast<double>(ops);
  measuring = false;
  stopping = true;
  auto& conns = g.conns();
  g.RunUntil(
      [&] {
        return std::all_of(conns.begin(), conns.end(), [](auto& c) { return c->expects.empty(); });
      },
      Deadline(o), "the last answers");
  const double rate = static_cast<double>(ops) / wall;
  if (o.json) {
    json j = {
        {"mode", "ops"}, {"clients", po.clients}, {"seconds", wall}, {"ops_per_second", rate}};
    if (o.server_pid) j["server_cpu_us_per_op"] = server_us_per_op;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "%zu client(s), SET+GET in a closed loop for %.1f s: %.0f ops/s%s\n", po.clients, wall, rate,
      o.server_pid ? fmt::format("; server CPU {:.1f} us per op", server_us_per_op).c_str() : "");
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"store_loadgen: drives a TCPStore server (protocol v1 or v2) with many connections"};
  app.require_subcommand(1);
  Common o;
  std::string protocol = "v1";
  auto common = [&](CLI::App* sub) {
    sub->add_option("--protocol", protocol,
                    "v1 (torch 1.10 to 2.1; trun's store, torch 1.13's server) or v2 (torch "
                    "2.2+'s server)")
        ->check(CLI::IsMember({"v1", "v2"}));
    sub->add_option("--host", o.host, "Server address (an IP literal)");
    sub->add_option("--port", o.port, "Server port")->required()->check(CLI::Range(1, 65535));
    sub->add_option("--connect-concurrency", o.connect_concurrency,
                    "Most connections connecting at once")
        ->check(CLI::Range(1, 1000000));
    sub->add_option("--source-hosts", o.source_hosts,
                    "Bind the connections in turn to this many loopback source addresses "
                    "(127.1.0.1, ...), as from that many hosts (0: one)")
        ->check(CLI::Range(0, 65000));
    sub->add_option("--timeout", o.timeout_s, "Seconds to wait for any one phase");
    sub->add_flag("--whole-requests", o.whole_requests,
                  "Send each request in one write (torch 1.13's client sends its opcode byte "
                  "alone, then the rest)");
    sub->add_option("--server-pid", o.server_pid,
                    "The server's process: report its CPU time (and for load, its RSS growth)");
    sub->add_flag("--json", o.json, "Print one JSON object");
  };
  // The modes that run for a time: how many connections, how long, after
  // how long a warm-up.
  auto timed = [&](CLI::App* sub, const char* count_flag, size_t& count, double& seconds,
                   double& warmup) {
    common(sub);
    sub->add_option(count_flag, count, "Connections")->check(CLI::Range(1, 1000000));
    sub->add_option("--seconds", seconds, "Seconds measured");
    sub->add_option("--warmup", warmup, "Seconds run before measuring");
  };
  LoadOptions lo;
  auto* load = app.add_subcommand("load", "latency of SET/GET/ADD with many connections open");
  timed(load, "--conns", lo.conns, lo.seconds, lo.warmup);
  load->add_option("--rate", lo.rate, "Requests per second, all connections together; 0: closed");
  load->add_option("--value-bytes", lo.value_bytes, "Size of each SET's value");
  BarrierOptions bo;
  auto* barrier = app.add_subcommand("barrier", "time ADD-then-WAIT barriers");
  common(barrier);
  barrier->add_option("--clients", bo.clients, "Clients in the barrier")
      ->check(CLI::Range(1, 1000000));
  barrier->add_option("--repeat", bo.repeat, "Rounds")->check(CLI::Range(1, 1000000));
  barrier
      ->add_option("--conns-per-client", bo.conns_per_client,
                   "Connections per client (torch 1.13: 2, the second idle)")
      ->check(CLI::Range(1, 16));
  barrier->add_option("--arrival-ms", bo.arrival_ms,
                      "Spread the clients' ADDs evenly over this many ms (default: all at once)");
  OpsOptions po;
  auto* ops = app.add_subcommand("ops", "set+get operations per second");
  timed(ops, "--clients", po.clients, po.seconds, po.warmup);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  g_op = protocol == "v2" ? kV2Opcodes : kV1Opcodes;
  if (*load) return RunLoad(o, lo);
  if (*barrier) return RunBarrier(o, bo);
  return RunOps(o, po);
}

}  // namespace
}  // namespace trun::store

int main(int argc, char** argv) { return trun::store::Main(argc, argv); }
