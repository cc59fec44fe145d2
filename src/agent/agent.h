// LocalAgent: runs one node's worker group to completion, as torchrun's
// LocalElasticAgent does, but driven by events instead of a polling loop.
//
// The whole state machine is in agent.cc, in order:
//   Start -> StartAttempt -> RUNNING
//   RUNNING  --worker exits non-zero--> STOPPING(SIGTERM) -> restart or FAILED
//   RUNNING  --all exit 0-------------> SUCCEEDED
//   any      --handled signal---------> STOPPING(that signal) -> exit 128+sig
// One asio event loop on the calling thread sees child exits (SIGCHLD),
// worker output (pipes), signals and the shutdown grace timer the moment they
// happen; --monitor-interval is accepted and ignored.
//
// Processes: every worker leads its own process group with a parent-death
// signal; trun is a child subreaper; a sentinel process (proc/sentinel.h)
// kills every worker group left behind if trun itself is killed.
//
// Thread-safety: Run() is called once, from the thread that will own the
// workers (PR_SET_PDEATHSIG is per thread).
#pragma once

#include <memory>

#include "launch/config.h"

namespace trun::agent {

// trun's exit codes, documented in docs/cli.md.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitWorkersFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitLaunchError = 3;  // trun could not start (log dir, spawn, ...)
// A handled signal ends trun with 128 + its number, as a shell reports it.

class LocalAgent {
 public:
  explicit LocalAgent(launch::LaunchConfig config);
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
