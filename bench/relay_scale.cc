// relay_scale: N ranks through per-node fan-in (issue 31 part 3). One
// store; N/8 relays (the agent's own relay code, store/relay.h), spread over
// several processes so that each stays under the descriptor limit; 8 client
// connections per relay, each sending the bytes torch 2.x's client sends:
// connect (VALIDATE, PING), the start-up barrier (ADD of the barrier key;
// the rank whose ADD completes the count SETs the done key; everyone WAITs
// on it), then an NCCL-style broadcast (rank 0 SETs a key, every rank WAITs
// on it and GETs it). Prints the time from the clients' first connect to
// the last rank's GET, the store's connection count meanwhile, and the CPU
// seconds that phase cost the store and the relays' processes (which tell
// what the machine's load took from the wall time).
//
//   relay_scale [RANKS] [PROCESSES]     (default 100000 25)
//
// Thread-safety: each process runs one event loop; the store has its own
// thread in the parent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/encode.h"
#include "store/process_limits.h"
#include "store/relay.h"
#include "store/server.h"
#include "store/server_thread.h"
#include "store/wire_format.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace st = trun::store;

constexpr int kPerNode = 8;

std::string Key(uint8_t op, const std::string& key) {
  std::string o;
  st::PutU8(o, op);
  st::PutBytes(o, key);
  return o;
}

std::string WaitFor(const std::string& key) {
  std::string o;
  st::PutU8(o, st::v2::kWait);
  st::PutI64(o, 1);
  st::PutBytes(o, key);
  return o;
}

// A WAIT on `key`, after a SET of it to `value` where `set`: one write,
// as a rank that publishes a key and then waits on it sends them.
std::string SetThenWait(bool set, const std::string& key, const std::string& value) {
  std::string o;
  if (set) {
    o = Key(st::v2::kSet, key);
    st::PutBytes(o, value);
  }
  return o + WaitFor(key);
}

// The simulated ranks of one process: each its own TCP connection, sending
// the bytes torch 2.x's client sends, one request at a time. They share one
// epoll set of their own (edge-triggered, each socket registered once),
// drained in batches from the relays' loop, so that what the ranks cost is
// what torch's clients cost the kernel (a connect, then one send and one
// recv per request) and not a harness's: no thread, handler or buffer
// allocated per request, and no read tried before a reply can be there.
// Every method runs on the io_context's one thread.
class Ranks {
 public:
  Ranks(asio::io_context& io, int world)
      : world_(world), wake_(io, ::epoll_create1(EPOLL_CLOEXEC)) {}

  void Connect(int rank, int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) Fail(rank, "socket", errno);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.u32 = static_cast<uint32_t>(ranks_.size());
    ranks_.push_back(Rank{fd, rank, Step::kConnecting, 0, {}});
    if (::epoll_ctl(wake_.native_handle(), EPOLL_CTL_ADD, fd, &ev) != 0) Fail(rank, "epoll", errno);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      Fail(rank, "connect", errno);
    }
  }

  // Serves the ranks' events whenever their epoll set has some, on `io`.
  void Run() {
    wake_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
      if (ec) Fail(-1, "epoll wait", ec.value());
      Drain();
      if (done_ < ranks_.size()) Run();
    });
  }

  size_t done() const { return done_; }

  // Closes every connection with a reset rather than a FIN: a closed
  // connection's TIME_WAIT would hold its ephemeral port for a minute, and
  // 100,000 of them leave the next run's relays no port to listen on.
  void Reset() {
    linger now{1, 0};
    for (const Rank& r : ranks_) {
      ::setsockopt(r.fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
      ::close(r.fd);
    }
  }

 private:
  enum class Step : uint8_t { kConnecting, kPing, kAdd, kBarrier, kBroadcast, kGet, kDone };
  struct Rank {
    int fd;
    int rank;
    Step step = Step::kConnecting;
    uint8_t have = 0;  // reply bytes read so far
    char in[8 + 14];
  };

  void Drain() {
    std::array<epoll_event, 512> events;
    while (true) {
      int n = ::epoll_wait(wake_.native_handle(), events.data(), events.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Fail(-1, "epoll_wait", errno);
      for (int i = 0; i < n; ++i)
        OnEvent(ranks_[events[static_cast<size_t>(i)].data.u32],
                events[static_cast<size_t>(i)].events);
      if (static_cast<size_t>(n) < events.size()) return;
    }
  }

  void OnEvent(Rank& r, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      Fail(r.rank, "socket", err ? err : ECONNRESET);
    }
    if (r.step == Step::kConnecting) {
      if (!(events & EPOLLOUT)) return;
      std::string hello;
      st::PutU8(hello, st::v2::kValidate);
      st::PutU32(hello, st::kValidationMagic);
      st::PutU8(hello, st::v2::kPing);
      st::PutU32(hello, static_cast<uint32_t>(r.rank));
      r.step = Step::kPing;
      return Send(r, hello);
    }
    if (!(events & EPOLLIN) || r.step == Step::kDone) return;
    // One request is out at a time, so a whole reply leaves nothing unread
    // and needs no further recv; a part of one is read on until the socket
    // is empty (edge-triggered, the next part brings the next edge).
    const size_t want = ReplySize(r.step);
    while (r.have < want) {
      ssize_t k = ::recv(r.fd, r.in + r.have, want - r.have, 0);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k <= 0) Fail(r.rank, "recv", k == 0 ? ECONNRESET : errno);
      r.have = static_cast<uint8_t>(r.have + k);
    }
    r.have = 0;
    Advance(r);
  }

  static size_t ReplySize(Step s) {
    switch (s) {
      case Step::kPing:
        return 4;
      case Step::kAdd:
        return 8;
      case Step::kGet:
        return 8 + 14;
      default:
        return 1;  // STOP_WAITING
    }
  }

  void Advance(Rank& r) {
    std::string out;
    switch (r.step) {
      case Step::kPing:
        out = Key(st::v2::kAdd, "/barrier");
        st::PutI64(out, 1);
        r.step = Step::kAdd;
        break;
      case Step::kAdd: {
        int64_t n = 0;
        std::memcpy(&n, r.in, 8);
        // The last to arrive ends the barrier, as torch's store-based
        // barrier's last rank does.
        out = SetThenWait(n == world_, "/barrier/done", "1");
        r.step = Step::kBarrier;
        break;
      }
      case Step::kBarrier:
        out = SetThenWait(r.rank == 0, "/bcast", "nccl-unique-id");
        r.step = Step::kBroadcast;
        break;
      case Step::kBroadcast:
        out = Key(st::v2::kGet, "/bcast");
        r.step = Step::kGet;
        break;
      case Step::kGet:
        if (std::string_view(r.in + 8, 14) != "nccl-unique-id") {
          std::fprintf(stderr, "relay_scale: rank %d read a wrong value\n", r.rank);
          std::_Exit(1);
        }
        // The connection stays open, as a rank's store connection does for
        // the whole job; the process's exit closes it, after the timing.
        r.step = Step::kDone;
        ++done_;
        return;
      default:
        return;
    }
    Send(r, out);
  }

  // Requests are a few dozen bytes: each goes whole into an empty send
  // buffer, in one send, as torch's client writes it.
  void Send(Rank& r, const std::string& bytes) {
    ssize_t k = ::send(r.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (k != static_cast<ssize_t>(bytes.size())) Fail(r.rank, "send", k < 0 ? errno : EAGAIN);
  }

  [[noreturn]] static void Fail(int rank, const char* what, int err) {
    std::fprintf(stderr, "relay_scale: rank %d: %s: %s\n", rank, what, std::strerror(err));
    std::_Exit(1);
  }

  const int world_;
  asio::posix::stream_descriptor wake_;
  std::vector<Rank> ranks_;
  size_t done_ = 0;
};

// CPU seconds (user and system) this process has used.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void WriteByte(int fd) {
  char b = 1;
  if (::write(fd, &b, 1) != 1) std::_Exit(1);
}

void ReadByte(int fd) {
  char b;
  if (::read(fd, &b, 1) != 1) std::_Exit(1);
}

// A child: its relays, then (at "go") its ranks.
[[noreturn]] void Child(int store_port, int first_node, int nodes, int world, int ready_fd,
                        int go_fd, int done_fd, int exit_fd) {
  asio::io_context io(1);
  std::vector<std::unique_ptr<st::Relay>> relays;
  for (int n = 0; n < nodes; ++n) {
    st::RelayOptions o;
    o.store_host = "127.0.0.1";
    o.store_port = store_port;
    o.connect_timeout = std::chrono::seconds(60);
    auto r = st::Relay::Start(io, o);
    if (!r.ok()) {
      std::fprintf(stderr, "relay_scale: relay: %s\n", r.status().ToString().c_str());
      std::_Exit(1);
    }
    relays.push_back(std::move(*r));
  }
  WriteByte(ready_fd);
  ReadByte(go_fd);
  double cpu_at_go = CpuSeconds();
  Ranks ranks(io, world);
  for (int n = 0; n < nodes; ++n) {
    for (int i = 0; i < kPerNode; ++i) {
      ranks.Connect((first_node + n) * kPerNode + i, relays[static_cast<size_t>(n)]->port());
    }
  }
  ranks.Run();
  while (ranks.done() < static_cast<size_t>(nodes) * kPerNode) io.run_one();
  // What this process's relays and ranks cost the barrier and broadcast.
  double cpu = CpuSeconds() - cpu_at_go;
  if (::write(done_fd, &cpu, sizeof cpu) != sizeof cpu) std::_Exit(1);
  // The links stay up until the parent has counted the store's connections.
  ReadByte(exit_fd);
  ranks.Reset();
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int processes = argc > 2 ? std::atoi(argv[2]) : 25;
  if (ranks < kPerNode || ranks % kPerNode != 0 || processes < 1) {
    std::fprintf(stderr, "usage: relay_scale [RANKS, a multiple of 8] [PROCESSES]\n");
    return 2;
  }
  const int nodes = ranks / kPerNode;
  st::RaiseOpenFileLimit();
  st::ServerOptions so;
  so.host = "127.0.0.1";
  auto store = st::StoreServerThread::Start(so);
  if (!store.ok()) {
    std::fprintf(stderr, "relay_scale: store: %s\n", store.status().ToString().c_str());
    return 1;
  }
  int ready[2], go[2], done[2], quit[2];
  if (::pipe(ready) || ::pipe(go) || ::pipe(done) || ::pipe(quit)) return 1;
  auto setup_start = Clock::now();
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    int first = nodes * p / processes, last = nodes * (p + 1) / processes;
    pid_t pid = ::fork();
    if (pid == 0) {
      Child((*store)->port(), first, last - first, ranks, ready[1], go[0], done[1], quit[0]);
    }
    children.push_back(pid);
  }
  for (int p = 0; p < processes; ++p) ReadByte(ready[0]);
  double setup_s = std::chrono::duration<double>(Clock::now() - setup_start).count();
  auto start = Clock::now();
  // The parent's main thread waits on pipes meanwhile: its CPU time is the
  // store's.
  double store_cpu = CpuSeconds();
  for (int p = 0; p < processes; ++p) WriteByte(go[1]);
  double relays_cpu = 0;
  for (int p = 0; p < processes; ++p) {
    double cpu = 0;
    if (::read(done[0], &cpu, sizeof cpu) != sizeof cpu) return 1;
    relays_cpu += cpu;
  }
  double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  store_cpu = CpuSeconds() - store_cpu;
  size_t connections = 0;
  (*store)->RunOnLoop([&](st::StoreServer& s) { connections = s.num_connections(); });
  for (int p = 0; p < processes; ++p) WriteByte(quit[1]);
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::printf(
      "relay_scale ranks=%d relays=%d processes=%d barrier_and_broadcast_s=%.3f "
      "store_connections=%zu relays_setup_s=%.3f store_cpu_s=%.3f relays_and_ranks_cpu_s=%.3f "
      "failed_processes=%d\n",
      ranks, nodes, processes, total_s, connections, setup_s, store_cpu, relays_cpu, failed);
  return failed == 0 && connections == static_cast<size_t>(nodes) ? 0 : 1;
}
