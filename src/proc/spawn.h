// Starting a worker process: its own process group, a parent-death signal,
// chosen stdio, an exact environment.
//
// Spawn() clones with CLONE_VM|CLONE_VFORK (what glibc's posix_spawn does
// internally) rather than fork(): the parent is suspended only until the
// child execs, no page tables are copied, and exec failures come back as a
// Status rather than a child that exits 127. posix_spawn itself cannot set
// PR_SET_PDEATHSIG, which the no-orphans guarantee needs.
//
// Thread-safety: call from one thread; PR_SET_PDEATHSIG fires when the
// *thread* that spawned the child exits, so spawn from a thread that lives as
// long as the workers (the agent's event-loop thread).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace trun::proc {

// This process's environment as "KEY=VALUE" entries, with `overrides`
// replacing (or adding) the variables they name.
std::vector<std::string> EnvironWith(const std::map<std::string, std::string>& overrides = {});

struct SpawnOptions {
  // argv[0] is looked up on PATH when it has no slash (execvp's rule).
  std::vector<std::string> argv;
  // The whole environment, "KEY=VALUE" each.
  std::vector<std::string> env;
  // File descriptors to install as the child's 0, 1, 2; -1 inherits ours.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Make the child the leader of a new process group (pgid == pid).
  bool new_process_group = true;
  // Delivered to the child when the spawning thread dies; 0 for none.
  int parent_death_signal = SIGKILL;
  // Set to their default action in the child, even where this process
  // ignores them (a signal this process handles is always reset).
  std::vector<int> default_signals;
  // The CPUs the child (and every thread it starts) may run on, set before
  // it execs, as `numactl --physcpubind` does; empty: this process's.
  std::vector<int> cpus;
};

// Resolves a program name the way execvp does, against `path` (PATH's value).
// Returns the name itself when it contains a slash.
Result<std::string> ResolveExecutable(const std::string& name, const std::string& path);

// Starts the process; returns its pid. Fails (and leaves nothing running) when
// the program cannot be executed.
Result<pid_t> Spawn(const SpawnOptions& options);

}  // namespace trun::proc
