// The orphan sentinel: a tiny process that outlives trun by a moment and kills
// every worker process group trun left behind.
//
// Each worker gets PR_SET_PDEATHSIG, but that signal reaches only the worker
// itself, not the processes it started (DataLoader workers, a shell's
// children). So at start-up trun forks this sentinel, which sits in its own
// process group reading a pipe: trun writes each worker's process-group id
// when it spawns it and again when it has finished with it. When the pipe
// reaches EOF (trun exited, or was killed with SIGKILL) the sentinel sends
// SIGKILL to every group still registered, then exits. A clean exit of trun
// unregisters everything first, so the sentinel then kills nothing.
//
// Thread-safety: Register/Unregister from one thread.
#pragma once

#include <sys/types.h>

#include "common/status.h"

namespace trun::proc {

class Sentinel {
 public:
  // Forks the sentinel. Call before any worker pipe exists, so the sentinel
  // holds none of them open.
  static Result<Sentinel> Start();

  Sentinel(Sentinel&& other) noexcept : pid_(other.pid_), fd_(other.fd_) { other.fd_ = -1; }
  Sentinel& operator=(Sentinel&&) = delete;
  ~Sentinel();

  void Register(pid_t pgid);
  void Unregister(pid_t pgid);
  pid_t pid() const { return pid_; }

 private:
  Sentinel(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  void Send(int32_t record);

  pid_t pid_;
  int fd_;
};

}  // namespace trun::proc
