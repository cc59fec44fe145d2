// The rendezvous at scale: N agents' rendezvous, each a real trun
// Rendezvous made from real launch flags (the code every agent runs: its two
// threads, its own store connections). The first agent hosts the store and
// the coordinator in this process, on a loop of its own; the others are
// spread over P child processes (this program again, `--child`), as a
// process may hold at most 20,000 descriptors here and each agent holds
// store connections. A child's agents share one event loop, which only
// runs what their threads post (an agent's loop of its own would be one
// thread more per agent on the same 2 cores), and run below the host's
// priority (Child says why). Prints the seconds from the first Start() to
// the moment every agent has its round.
//
//   rdzv_scale N c10d PORT [P [CONF [HOLD]]]
//   rdzv_scale N etcd HOST:PORT [P [CONF [HOLD]]]
//
// P: child processes (default: one per 1,000 agents); CONF: more
// --rdzv-conf settings for every agent (`heartbeat_interval=30`); HOLD:
// seconds to keep the round running afterwards, printing the host's CPU
// meanwhile (what N agents' heartbeats cost it), or `kill`: then SIGKILL
// one agent (a process of its own) and print the seconds until every
// other agent has its next round, or `fail`: then one agent (not the host)
// reports a worker failure as an agent with restarts left does (Failed(),
// then Ready() once its workers are stopped) and print the seconds until
// every agent has its next round, where each would start its workers.
// Many agents share two cores here, so this is an upper bound on what N
// agents on N hosts would take.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "launch/args.h"
#include "launch/rdzv_conf.h"
#include "rendezvous/rendezvous.h"

extern char** environ;

using namespace trun;

namespace {

struct Setup {
  int nodes = 0;  // in the whole job
  std::string backend;
  std::string endpoint;
  std::string conf;  // more --rdzv-conf settings, or ""
  // Each run its own: agents that exit without leaving keep an etcd run's
  // keys until their leases expire, and the next run would join them.
  std::string run_id;
};

// The loop that agents' rendezvous post to. Each agent has its own; here
// a child's agents share one, which only dispatches what their threads post.
struct Loop {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
};

struct Agent {
  asio::io_context& io;
  std::unique_ptr<rendezvous::Rendezvous> rdzv;
  // It reported the failure that ends the round (loop thread only): it
  // asked for the next round then, as an agent does, not at the round's end.
  bool failed = false;
};

std::unique_ptr<Agent> MakeAgent(Loop& loop, const Setup& s, bool host) {
  auto agent = std::make_unique<Agent>(loop.io);
  std::string conf = fmt::format("is_host={},join_timeout=120", host ? 1 : 0);
  if (!s.conf.empty()) conf += "," + s.conf;
  // One node fewer may go on, as after a kill (KILL): MIN:MAX.
  std::vector<std::string> args = {"--nnodes",         fmt::format("{}:{}", s.nodes - 1, s.nodes),
                                   "--nproc-per-node", "1",
                                   "--rdzv-backend",   s.backend,
                                   "--rdzv-endpoint",  s.endpoint,
                                   "--rdzv-id",        s.run_id,
                                   "--rdzv-conf",      conf,
                                   "--max-restarts",   "3",
                                   "--no-python",      "true"};
  auto parsed = launch::ParseLaunchArgs(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "rdzv_scale: %s\n", parsed.status().message().c_str());
    std::exit(2);
  }
  auto r = rendezvous::Make(agent->io, launch::RdzvOptions(parsed->config));
  if (!r.ok()) {
    std::fprintf(stderr, "rdzv_scale: %s\n", r.status().message().c_str());
    std::exit(2);
  }
  agent->rdzv = std::move(*r);
  return agent;
}

// Starts `agent` on its loop, without waiting; `got` runs on its loop when
// each round comes, and each round's end asks for the next.
void StartAgent(Agent& a, std::function<void()> got) {
  asio::post(a.io, [&a, got = std::move(got)] {
    Status s =
        a.rdzv->Start({[got](rendezvous::RoundOutcome r) {
                         if (auto* none = std::get_if<rendezvous::NoRound>(&r)) {
                           std::fprintf(stderr, "rdzv_scale: %s\n", none->why.message().c_str());
                           std::_Exit(1);
                         }
                         got();
                       },
                       // As an agent does once its workers are stopped.
                       [&a](const rendezvous::RoundEnd&) {
                         if (!std::exchange(a.failed, false)) a.rdzv->Ready();
                       }});
    if (!s.ok()) {
      std::fprintf(stderr, "rdzv_scale: %s\n", s.message().c_str());
      std::_Exit(1);
    }
  });
}

// This process's CPU time, user and system.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// As an agent whose worker exited non-zero with restarts left: Failed(),
// then Ready() once its (here: no) workers are stopped.
void FailWorkers(Agent& a) {
  asio::post(a.io, [&a] {
    a.failed = true;
    a.rdzv->Failed("rank 0 (local_rank 0, pid 1) exited with 1");
    a.rdzv->Ready();
  });
}

// A child: makes its agents, says "ready", starts them on "go" (a line on
// stdin), says "done" when every one has its round, has its first agent's
// workers fail on "fail", and exits on EOF. Exits
// without leaving: the measurement is over, and a host that outlives its
// nodes' goodbyes is not what is measured.
int Child(const Setup& s, int count) {
  // Below the host's process: on a real job every agent has a host of its
  // own, and the host's loop (the store, the coordinator) or etcd has
  // its cores to itself. Here 10,000 agents' threads would take the loop's
  // turn, its accept queue would overflow, and the kernel would drop the
  // connects that do not fit (retried 0.2-1 s later).
  ::setpriority(PRIO_PROCESS, 0, 10);
  Loop loop;
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < count; ++i) agents.push_back(MakeAgent(loop, s, false));
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) std::_Exit(1);
  const double cpu0 = CpuSeconds();
  std::atomic<int> rounds{0};
  std::promise<void> all;
  for (auto& a : agents) {
    StartAgent(*a, [&] {
      const int got = ++rounds;
      if (got == count) all.set_value();
      // Every agent has its second round (after a kill, KILL below).
      if (got == 2 * count) {
        std::printf("again\n");
        std::fflush(stdout);
      }
    });
  }
  all.get_future().wait();
  std::printf("done %.4f\n", CpuSeconds() - cpu0);
  std::fflush(stdout);
  while (std::fgets(line, sizeof line, stdin)) {
    if (std::string(line) == "fail\n") FailWorkers(*agents[0]);
  }
  std::_Exit(0);
}

struct Kid {
  pid_t pid = 0;
  FILE* to = nullptr;
  FILE* from = nullptr;
};

Kid Spawn(const char* self, const Setup& s, int count) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::vector<std::string> args = {
      self,   "--child", std::to_string(count), std::to_string(s.nodes), s.backend, s.endpoint,
      s.conf, s.run_id};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Kid k;
  if (posix_spawn(&k.pid, self, &fa, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "rdzv_scale: cannot start a child\n");
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  k.to = ::fdopen(in[1], "w");
  k.from = ::fdopen(out[0], "r");
  return k;
}

// Reads the child's next line, which starts with `word`; returns the
// number after it, if any.
double Expect(Kid& k, const char* word) {
  char line[64];
  if (!std::fgets(line, sizeof line, k.from) || !std::string(line).starts_with(word)) {
    std::fprintf(stderr, "rdzv_scale: a child did not say %s\n", word);
    std::exit(1);
  }
  return std::atof(line + std::strlen(word));
}

}  // namespace

int main(int argc, char** argv) {
  rlimit fds{};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &fds);
  if (argc == 8 && std::string(argv[1]) == "--child") {
    return Child({std::atoi(argv[3]), argv[4], argv[5], argv[6], argv[7]}, std::atoi(argv[2]));
  }
  if (argc < 4 || argc > 7) {
    std::fprintf(stderr,
                 "usage: rdzv_scale N c10d PORT [P [CONF [HOLD]]] | rdzv_scale N etcd HOST:PORT "
                 "[P [CONF [HOLD]]]\n");
    return 2;
  }
  Setup s;
  s.nodes = std::atoi(argv[1]);
  s.backend = argv[2];
  s.endpoint = s.backend == "c10d" ? fmt::format("127.0.0.1:{}", argv[3]) : std::string(argv[3]);
  const int procs = argc > 4 ? std::atoi(argv[4]) : std::max(1, (s.nodes + 999) / 1000);
  if (argc > 5) s.conf = argv[5];
  s.run_id = fmt::format("bench{}", ::getpid());
  const bool kill = argc > 6 && std::string(argv[6]) == "kill";
  const bool fail = argc > 6 && std::string(argv[6]) == "fail";
  const double hold = argc > 6 && !kill && !fail ? std::atof(argv[6]) : 0;
  if (s.nodes < 3 || procs < 1 || procs > s.nodes - 2) {
    std::fprintf(stderr, "rdzv_scale: N must be 3 or more, P from 1 to N-2\n");
    return 2;
  }

  Loop host_loop;
  auto host = MakeAgent(host_loop, s, true);
  std::vector<Kid> kids;
  const int others = s.nodes - 1 - (kill ? 1 : 0);
  for (int p = 0; p < procs; ++p) {
    int count = others / procs + (p < others % procs ? 1 : 0);
    kids.push_back(Spawn(argv[0], s, count));
  }
  if (kill) kids.push_back(Spawn(argv[0], s, 1));  // the victim, last
  for (auto& k : kids) Expect(k, "ready");

  std::promise<void> hosted, rehosted;
  int host_rounds = 0;
  const double cpu0 = CpuSeconds();
  auto t0 = std::chrono::steady_clock::now();
  // The host first, as the others' connects would otherwise back off.
  StartAgent(*host, [&] { (++host_rounds == 1 ? hosted : rehosted).set_value(); });
  std::promise<void> bound;  // the host's Start() has run: its store listens
  asio::post(host->io, [&] { bound.set_value(); });
  bound.get_future().wait();
  for (auto& k : kids) {
    std::fputs("go\n", k.to);
    std::fflush(k.to);
  }
  double agents_cpu = 0;
  for (auto& k : kids) agents_cpu += Expect(k, "done");
  hosted.get_future().wait();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.4f\n", seconds);
  // Where the time went: the host's process (the store and the coordinator,
  // and one agent) and the other agents'.
  std::fprintf(stderr, "rdzv_scale: CPU %.3f s in the host's process, %.3f s in the agents'\n",
               CpuSeconds() - cpu0, agents_cpu);
  if (hold > 0) {
    const double before = CpuSeconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(hold));
    std::fprintf(stderr, "rdzv_scale: CPU %.3f s in the host's process over %g s of the round\n",
                 CpuSeconds() - before, hold);
  }
  if (kill) {
    const auto t1 = std::chrono::steady_clock::now();
    ::kill(kids.back().pid, SIGKILL);
    for (size_t i = 0; i + 1 < kids.size(); ++i) Expect(kids[i], "again");
    rehosted.get_future().wait();
    std::fprintf(stderr, "rdzv_scale: every other agent had its next round %.4f s after the kill\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  }
  if (fail) {
    const double before = CpuSeconds();
    const auto t1 = std::chrono::steady_clock::now();
    std::fputs("fail\n", kids[0].to);
    std::fflush(kids[0].to);
    for (auto& k : kids) Expect(k, "again");
    rehosted.get_future().wait();
    std::fprintf(stderr,
                 "rdzv_scale: every agent had its next round %.4f s after one's workers failed "
                 "(CPU %.3f s in the host's process)\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(),
                 CpuSeconds() - before);
  }
  std::fflush(stdout);
  for (auto& k : kids) {
    std::fclose(k.to);
    ::waitpid(k.pid, nullptr, 0);
  }
  std::_Exit(0);  // the agents' memory goes with the process
}
