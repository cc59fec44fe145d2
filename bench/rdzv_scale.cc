// The rendezvous at scale: N agents' rendezvous in one process, each a real
// trun Rendezvous made from real launch flags on its own event loop (the
// code every agent runs: its loop, its two threads, its own store
// connections), one of them hosting the store and the coordinator. Prints
// the seconds from the first Start() to the moment every agent has its
// round.
//
//   rdzv_scale N c10d PORT
//   rdzv_scale N etcd HOST:PORT
//
// Many agents share two cores here, so this is an upper bound on what N
// agents on N hosts would take.
#include <fmt/format.h>
#include <sys/resource.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "launch/args.h"
#include "rendezvous/rendezvous.h"

using namespace trun;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rdzv_scale N c10d PORT | rdzv_scale N etcd HOST:PORT\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const std::string backend = argv[2];
  const std::string endpoint =
      backend == "c10d" ? fmt::format("127.0.0.1:{}", argv[3]) : std::string(argv[3]);
  rlimit fds{};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &fds);

  // One loop per agent, as each agent has.
  struct Agent {
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    std::thread loop;
    std::unique_ptr<rendezvous::Rendezvous> rdzv;
  };
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < n; ++i) {
    auto agent = std::make_unique<Agent>();
    std::vector<std::string> args = {
        "--nnodes",         std::to_string(n),
        "--nproc-per-node", "1",
        "--rdzv-backend",   backend,
        "--rdzv-endpoint",  endpoint,
        "--rdzv-id",        "bench",
        "--rdzv-conf",      fmt::format("is_host={},join_timeout=120", i == 0 ? 1 : 0),
        "--no-python",      "true"};
    auto parsed = launch::ParseLaunchArgs(args);
    if (!parsed.ok()) {
      std::fprintf(stderr, "rdzv_scale: %s\n", parsed.status().message().c_str());
      return 2;
    }
    auto r = rendezvous::Make(agent->io, parsed->config);
    if (!r.ok()) {
      std::fprintf(stderr, "rdzv_scale: %s\n", r.status().message().c_str());
      return 2;
    }
    agent->rdzv = std::move(*r);
    agent->loop = std::thread([a = agent.get()] { a->io.run(); });
    agents.push_back(std::move(agent));
  }

  std::atomic<int> rounds{0};
  std::promise<void> all;
  auto t0 = std::chrono::steady_clock::now();
  for (auto& a : agents) {
    // The host first, as the others' connects would otherwise back off.
    std::promise<Status> started;
    asio::post(a->io, [&] {
      started.set_value(a->rdzv->Start({[&](Result<rendezvous::Round> r) {
                                          if (!r.ok()) {
                                            std::fprintf(stderr, "rdzv_scale: %s\n",
                                                         r.status().message().c_str());
                                            std::exit(1);
                                          }
                                          if (++rounds == n) all.set_value();
                                        },
                                        [](const std::string&) {}}));
    });
    Status s = started.get_future().get();
    if (!s.ok()) {
      std::fprintf(stderr, "rdzv_scale: %s\n", s.message().c_str());
      return 1;
    }
  }
  all.get_future().wait();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.4f\n", seconds);
  std::fflush(stdout);

  // The host last, so that nobody meanwhile mistakes its going for a loss.
  for (auto it = agents.rbegin(); it != agents.rend(); ++it) {
    Agent& a = **it;
    asio::post(a.io, [&a] {
      a.rdzv->Shutdown();
      a.work.reset();
      a.io.stop();
    });
    a.loop.join();
  }
  std::_Exit(0);  // the agents' memory goes with the process
}
