// The seams between GroupSupervisor (group_supervisor.h) and the system:
// ProcessTable is what it asks of the kernel (spawn, signal a group, reap,
// list and kill children), Loop is how it waits (post, one-shot timers).
// SystemProcessTable and AsioLoop are the real ones; tests give fakes, as
// ninja tests its builder with a fake CommandRunner.
//
// Thread-safety: none; each is owned by one event-loop thread.
#pragma once

#include <sys/types.h>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "proc/sentinel.h"
#include "proc/spawn.h"

namespace trun::proc {

// A child that ended: its exit code, or minus the signal that killed it
// (torch's convention).
struct ChildExit {
  pid_t pid = 0;
  int exitcode = 0;
};

// The exit code of a waitpid() status in that convention.
int ExitCodeOf(int wait_status);

class ProcessTable {
 public:
  virtual ~ProcessTable() = default;

  // Starts a process as the leader of a new process group.
  virtual Result<pid_t> Spawn(const SpawnOptions& options) = 0;
  // Sends `sig` to every process of group `pgid`.
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // The group will not be signalled again: what the orphan sentinel knows
  // of it can go.
  virtual void Forget(pid_t pgid) = 0;
  // One exited child, any child (orphans reparented to us included), or
  // nothing when none has exited; never blocks.
  virtual std::optional<ChildExit> Reap() = 0;
  // Calls `on_exit` from the event loop each time a child may have exited
  // (SIGCHLD); it then calls Reap() until that returns nothing.
  virtual void WatchExits(std::function<void()> on_exit) = 0;
  // SIGKILLs and reaps every child we have now (the sentinel excepted);
  // returns their pids.
  virtual std::vector<pid_t> KillChildren() = 0;
  // Calls `ready` once Spawn can start a worker without waiting on anything
  // but the kernel: at once (as here), or later from the event loop (a warm
  // process still importing, warm_table.h). The loop must never block on
  // that wait: it also serves the rendezvous, whose peers take an agent
  // silent for 5 s for a lost one.
  virtual void WhenReady(std::function<void()> ready) { ready(); }
};

// Makes the process table on a supervisor's event loop: the system's in the
// real agent and local supervisor, a fake (fake_process_table.h) in their
// unit tests.
using ProcessTableFactory = std::function<Result<std::unique_ptr<ProcessTable>>(asio::io_context&)>;

// The kernel's process table. Start() makes the calling process a child
// subreaper, so that descendants that leave their group come back to us,
// and forks the orphan sentinel (sentinel.h): call it before any pipe the
// workers will use exists.
class SystemProcessTable final : public ProcessTable {
 public:
  static Result<std::unique_ptr<SystemProcessTable>> Start(asio::io_context& io);
  ~SystemProcessTable() override;

  Result<pid_t> Spawn(const SpawnOptions& options) override;
  void SignalGroup(pid_t pgid, int sig) override;
  void Forget(pid_t pgid) override;
  std::optional<ChildExit> Reap() override;
  void WatchExits(std::function<void()> on_exit) override;
  std::vector<pid_t> KillChildren() override;
  // A group another process started and that is now our child (a warm
  // start's worker, warm_table.h): the orphan sentinel guards it as it
  // guards what Spawn starts.
  void Adopt(pid_t pgid) { sentinel_.Register(pgid); }

 private:
  SystemProcessTable(asio::io_context& io, Sentinel sentinel);
  void Wait();

  asio::signal_set sigchld_;
  Sentinel sentinel_;
  std::function<void()> on_exit_;
};

// Deferred work and one-shot timers: the clock seam.
class Loop {
 public:
  using TimerId = uint64_t;
  virtual ~Loop() = default;
  // Runs `fn` from the loop, after what is running now.
  virtual void Post(std::function<void()> fn) = 0;
  // Runs `fn` once after `delay` unless Cancel(id) comes first.
  virtual TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  virtual void Cancel(TimerId id) = 0;
};

class AsioLoop final : public Loop {
 public:
  explicit AsioLoop(asio::io_context& io) : io_(io) {}
  ~AsioLoop() override;
  void Post(std::function<void()> fn) override;
  TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) override;
  void Cancel(TimerId id) override;

 private:
  asio::io_context& io_;
  TimerId next_ = 1;
  std::map<TimerId, std::unique_ptr<asio::steady_timer>> timers_;
};

}  // namespace trun::proc
