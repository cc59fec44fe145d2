// GroupSupervisor: the one place where trun starts, reaps and stops the
// process groups it supervises. The agent's workers and the local
// scheduler's replicas both run under it.
//
// Each process it starts leads a group of its own (its children are in it
// unless they leave). The rules it keeps:
//   - Stop(groups, sig, grace): `sig` to each group now, SIGKILL to the ones
//     still running `grace` later; the continuation runs (posted to the
//     loop, never from inside the call) once none of them runs. A Stop while
//     one is under way joins it: its groups are added, its continuation
//     replaces the earlier one, the first grace timer stands.
//   - An exit is reported with `stopped` set when the group had been asked
//     to stop: that tells a failure from a casualty.
//   - Release(pid): the caller is done with a group; whatever is left of it
//     (grandchildren) is SIGKILLed and the orphan sentinel forgets it.
//   - KillOrphans(): every other child (descendants that left their group
//     and were reparented to us, a subreaper) is SIGKILLed and reaped.
//
// Thread-safety: none; call from the loop's thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <vector>

#include "proc/process_table.h"

namespace trun::proc {

struct GroupExit {
  pid_t pid = 0;
  int exitcode = 0;      // exit code, or minus the signal number
  bool stopped = false;  // it had been asked to stop
};

class GroupSupervisor {
 public:
  struct Hooks {
    // Each exit of a group leader, in the order they are reaped.
    std::function<void(const GroupExit&)> on_exit;
    // After each batch of exits (one SIGCHLD), once every exit is reported.
    std::function<void()> after_exits;
    // The grace period ran out with groups still running; they get SIGKILL
    // right after.
    std::function<void()> on_grace_expired;
  };

  GroupSupervisor(ProcessTable& table, Loop& loop, Hooks hooks);
  ~GroupSupervisor();
  GroupSupervisor(const GroupSupervisor&) = delete;
  GroupSupervisor& operator=(const GroupSupervisor&) = delete;

  Result<pid_t> Start(const SpawnOptions& options);

  void Stop(const std::vector<pid_t>& groups, int sig, std::chrono::milliseconds grace,
            std::function<void()> then);
  // Every running group.
  void StopAll(int sig, std::chrono::milliseconds grace, std::function<void()> then);
  // SIGKILL now to every group being stopped (a second signal: no more grace).
  void KillStopping();

  void Release(pid_t pid);
  std::vector<pid_t> KillOrphans();

  bool running(pid_t pid) const;
  // Running groups.
  int live() const;
  bool stopping() const { return stop_.has_value(); }

 private:
  struct Group {
    bool running = true;
    bool stopping = false;
  };
  struct PendingStop {
    std::function<void()> then;
    Loop::TimerId grace_timer = 0;
  };

  void OnChildExited();
  void MaybeStopped();

  ProcessTable& table_;
  Loop& loop_;
  Hooks hooks_;
  std::map<pid_t, Group> groups_;
  std::optional<PendingStop> stop_;
};

}  // namespace trun::proc
