// LocalAgent: runs one node's worker group to completion, as torchrun's
// LocalElasticAgent does, but driven by events instead of a polling loop.
//
// Its states (agent.cc's State), and what moves it between them:
//
//   WAITING --a round is given----------------> STARTING, until the process table is
//               ready (at once; a warm process once it has imported), the loop
//               serving the rendezvous meanwhile --> RUNNING (one process group
//               per worker)
//   STARTING --another node ended the round---> WAITING for the next round
//   STARTING --a handled signal---------------> DONE (exit 128+sig; no workers to stop)
//   RUNNING --a worker exits non-zero---------> STOPPING (SIGTERM, grace, SIGKILL)
//           --> WAITING for the next round (a restart), or DONE (exit 1) when
//               the restart budget is spent
//   RUNNING --another node ended the round----> STOPPING --> WAITING for the next round
//   RUNNING --every worker exits 0------------> WAITING in the exit barrier --> DONE (exit 0)
//   RUNNING --a handled signal----------------> STOPPING (that signal) --> DONE (exit 128+sig)
//   STOPPING --a handled signal---------------> stays STOPPING, then DONE (exit 128+sig);
//              a second signal SIGKILLs what is left at once
//   WAITING --a handled signal----------------> DONE (exit 128+sig; no workers to stop)
//   WAITING --the rendezvous fails------------> DONE (exit 1)
//   WAITING --the workers cannot be started---> STOPPING (SIGKILL) --> DONE (exit 3)
//
// One asio event loop on the calling thread sees child exits (SIGCHLD),
// worker output (pipes), signals and the shutdown grace timer the moment they
// happen; --monitor-interval is accepted and ignored.
//
// Processes: the workers run under a proc::GroupSupervisor: each leads its
// own process group with a parent-death signal; trun is a child subreaper;
// a sentinel process (proc/sentinel.h) kills every worker group left behind
// if trun itself is killed. Exit codes are common/exit_code.h's.
//
// Thread-safety: Run() is called once, from the thread that will own the
// workers (PR_SET_PDEATHSIG is per thread).
#pragma once

#include <functional>
#include <memory>

#include "common/status.h"
#include "launch/config.h"
#include "proc/process_table.h"

namespace trun::agent {

class LocalAgent {
 public:
  // Makes the process table the workers run in, on the agent's event loop:
  // the system's by default, a fake in the agent's unit tests.
  using ProcessTableFactory = proc::ProcessTableFactory;
  // Makes the clock the workers' supervisor waits on (the stop grace): the
  // event loop's by default, a virtual one in the unit tests.
  using LoopFactory = std::function<std::unique_ptr<proc::Loop>(asio::io_context&)>;

  explicit LocalAgent(launch::LaunchConfig config, ProcessTableFactory table = {},
                      LoopFactory loop = {});
  ~LocalAgent();
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  // Runs the job; returns trun's exit code.
  int Run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trun::agent
