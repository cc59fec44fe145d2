// WarmProcessTable: the process table of warm starts (`--start-method
// forkserver`). Workers are forked from one Python process per node that
// has imported torch (and the modules the user names) once, instead of
// each paying for that import after every launch and restart.
//
// It is the system's table (SystemProcessTable, composed) with another
// Spawn: a request (warm_protocol.h) to the warm process, which forks the
// worker so that it becomes trun's own child before it runs user code
// (warm_server.h). From then on the worker is like any other: trun reaps it,
// signals its group, the orphan sentinel guards it (SystemProcessTable's
// Adopt), it has PR_SET_PDEATHSIG. The warm process itself is a child like
// the workers (own group, parent-death signal, registered with the
// sentinel), so `kill -9` of trun leaves nothing.
//
// When the warm process exits (killed, or out of memory) the next Spawn
// (or WhenReady) starts another; when that one cannot fork a worker either,
// Spawn fails with the reason. Spawn blocks until the warm process answers:
// a fork's time once it is ready, but until its imports are done before
// that (torch 2.x on a loaded machine: 20 s and more). So the agent waits
// for WhenReady first, on its loop, which goes on serving the rendezvous
// meanwhile; only a warm process that dies while importing leaves Spawn
// to start another and block on its imports.
//
// Thread-safety: none; owned by the agent's event-loop thread, which must
// also be the thread that lives as long as the workers (spawn.h).
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proc/process_table.h"

namespace trun::proc {

struct WarmOptions {
  std::string python;                // the workers' interpreter
  std::vector<std::string> imports;  // modules imported before any fork
  std::vector<std::string> env;      // the warm process's environment
  // The signals trun handles, so that the warm process (started before trun
  // handles them) and the workers it forks start with their default action,
  // as a worker trun starts itself does, even when trun began ignoring one
  // (`nohup`, a shell's background job).
  std::vector<int> default_signals;
};

class WarmProcessTable final : public ProcessTable {
 public:
  // Starts the system's table and the warm process, which imports in the
  // background while the agent goes on.
  static Result<std::unique_ptr<WarmProcessTable>> Start(asio::io_context& io, WarmOptions options);
  ~WarmProcessTable() override;

  // options.argv must be a Python command (ParsePythonCommand); the worker
  // always leads a new process group and has SIGKILL as parent-death signal.
  Result<pid_t> Spawn(const SpawnOptions& options) override;
  void SignalGroup(pid_t pgid, int sig) override { system_->SignalGroup(pgid, sig); }
  void Forget(pid_t pgid) override { system_->Forget(pgid); }
  // The warm process's own exit is taken here, never reported.
  std::optional<ChildExit> Reap() override;
  void WatchExits(std::function<void()> on_exit) override {
    system_->WatchExits(std::move(on_exit));
  }
  std::vector<pid_t> KillChildren() override;
  // Once the warm process has said it is ready (warm_protocol.h), or is
  // gone; starts one when none runs.
  void WhenReady(std::function<void()> ready) override;

 private:
  WarmProcessTable(asio::io_context& io, std::unique_ptr<SystemProcessTable> system,
                   WarmOptions options);
  Status StartServer();
  // Reads the warm process's ready frame, blocking until it comes.
  Status ReadReady();
  // Runs what waits for WhenReady.
  void Readied();
  Result<std::string> Ask(const std::string& frame, const int fds[3]);
  // Ends the warm process (SIGKILL unless it is gone) and says how it ended.
  std::string EndServer();
  void ServerGone(pid_t pid);

  asio::io_context& io_;
  std::unique_ptr<SystemProcessTable> system_;
  WarmOptions options_;
  std::string cwd_;
  pid_t server_ = -1;
  int sock_ = -1;
  bool ready_ = false;  // the warm process behind sock_ has said so
  // While someone waits for WhenReady: sock_ watched on the loop.
  std::unique_ptr<asio::posix::stream_descriptor> watch_;
  std::vector<std::function<void()>> waiting_;
};

}  // namespace trun::proc
