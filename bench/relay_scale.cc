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
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "store/encode.h"
#include "store/process_limits.h"
#include "store/relay.h"
#include "store/server.h"
#include "store/server_thread.h"
#include "store/wire_format.h"

namespace {

using asio::ip::tcp;
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

// One rank: a torch 2.x client's bytes, one request at a time.
struct Rank : std::enable_shared_from_this<Rank> {
  Rank(asio::io_context& io, int rank, int world, int port, int* done)
      : socket(io), rank(rank), world(world), port(port), done(done) {}

  void Start() {
    socket.async_connect(
        tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<uint16_t>(port)),
        [self = shared_from_this()](std::error_code ec) {
          if (ec) return self->Fail("connect", ec);
          std::error_code ignored;
          self->socket.set_option(tcp::no_delay(true), ignored);
          std::string hello;
          st::PutU8(hello, st::v2::kValidate);
          st::PutU32(hello, st::kValidationMagic);
          st::PutU8(hello, st::v2::kPing);
          st::PutU32(hello, static_cast<uint32_t>(self->rank));
          self->Exchange(hello, 4, [self] { self->Arrive(); });
        });
  }

  void Arrive() {
    std::string add = Key(st::v2::kAdd, "/barrier");
    st::PutI64(add, 1);
    Exchange(add, 8, [self = shared_from_this()] {
      int64_t n = 0;
      std::memcpy(&n, self->in.data(), 8);
      std::string out;
      // The last to arrive ends the barrier, as torch's store-based
      // barrier's last rank does.
      if (n == self->world) {
        out = Key(st::v2::kSet, "/barrier/done");
        st::PutBytes(out, "1");
      }
      out += WaitFor("/barrier/done");
      self->Exchange(out, 1, [self] { self->Broadcast(); });
    });
  }

  void Broadcast() {
    std::string out;
    if (rank == 0) {
      out = Key(st::v2::kSet, "/bcast");
      st::PutBytes(out, "nccl-unique-id");
    }
    out += WaitFor("/bcast");
    Exchange(out, 1, [self = shared_from_this()] {
      self->Exchange(Key(st::v2::kGet, "/bcast"), 8 + 14, [self] {
        if (self->in.substr(8) != "nccl-unique-id") {
          std::fprintf(stderr, "relay_scale: rank %d read a wrong value\n", self->rank);
          std::_Exit(1);
        }
        ++*self->done;
        std::error_code ignored;
        self->socket.shutdown(tcp::socket::shutdown_both, ignored);
      });
    });
  }

  template <typename F>
  void Exchange(std::string request, size_t reply, F next) {
    out = std::move(request);
    in.assign(reply, '\0');
    asio::async_write(socket, asio::buffer(out),
                      [self = shared_from_this(), next](std::error_code ec, size_t) {
                        if (ec) return self->Fail("write", ec);
                        asio::async_read(self->socket, asio::buffer(self->in),
                                         [self, next](std::error_code ec, size_t) {
                                           if (ec) return self->Fail("read", ec);
                                           next();
                                         });
                      });
  }

  void Fail(const char* what, std::error_code ec) {
    std::fprintf(stderr, "relay_scale: rank %d: %s: %s\n", rank, what, ec.message().c_str());
    std::_Exit(1);
  }

  tcp::socket socket;
  int rank, world, port;
  int* done;
  std::string out, in;
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
  int done = 0;
  for (int n = 0; n < nodes; ++n) {
    for (int i = 0; i < kPerNode; ++i) {
      int rank = (first_node + n) * kPerNode + i;
      std::make_shared<Rank>(io, rank, world, relays[static_cast<size_t>(n)]->port(), &done)
          ->Start();
    }
  }
  while (done < nodes * kPerNode) io.run_one();
  // What this process's relays and ranks cost the barrier and broadcast.
  double cpu = CpuSeconds() - cpu_at_go;
  if (::write(done_fd, &cpu, sizeof cpu) != sizeof cpu) std::_Exit(1);
  // The links stay up until the parent has counted the store's connections.
  ReadByte(exit_fd);
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
