#include "proc/process_table.h"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <fstream>

namespace trun::proc {

int ExitCodeOf(int wait_status) {
  return WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}

Result<std::unique_ptr<SystemProcessTable>> SystemProcessTable::Start(asio::io_context& io) {
  // The sentinel first: it must hold none of the pipes made later.
  auto sentinel = Sentinel::Start();
  if (!sentinel.ok()) return sentinel.status();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  return std::unique_ptr<SystemProcessTable>(new SystemProcessTable(io, std::move(*sentinel)));
}

SystemProcessTable::SystemProcessTable(asio::io_context& io, Sentinel sentinel)
    : sigchld_(io, SIGCHLD), sentinel_(std::move(sentinel)) {}

SystemProcessTable::~SystemProcessTable() = default;

Result<pid_t> SystemProcessTable::Spawn(const SpawnOptions& options) {
  auto pid = proc::Spawn(options);
  if (pid.ok() && options.new_process_group) sentinel_.Register(*pid);
  return pid;
}

void SystemProcessTable::SignalGroup(pid_t pgid, int sig) { ::kill(-pgid, sig); }

void SystemProcessTable::Forget(pid_t pgid) { sentinel_.Unregister(pgid); }

std::optional<ChildExit> SystemProcessTable::Reap() {
  int status = 0;
  pid_t pid = ::waitpid(-1, &status, WNOHANG);
  if (pid <= 0) return std::nullopt;
  return ChildExit{pid, ExitCodeOf(status)};
}

void SystemProcessTable::WatchExits(std::function<void()> on_exit) {
  on_exit_ = std::move(on_exit);
  Wait();
}

void SystemProcessTable::Wait() {
  sigchld_.async_wait([this](std::error_code ec, int) {
    if (ec) return;
    on_exit_();
    Wait();
  });
}

// Our children are listed per thread in /proc/self/task/*/children: reading
// those few files costs far less than scanning all of /proc for a parent pid.
std::vector<pid_t> SystemProcessTable::KillChildren() {
  std::vector<pid_t> children;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(fmt::format("/proc/self/task/{}/children", e->d_name));
      pid_t pid;
      while (in >> pid) {
        if (pid != sentinel_.pid()) children.push_back(pid);
      }
    }
    ::closedir(d);
  }
  for (pid_t pid : children) ::kill(pid, SIGKILL);
  for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
  return children;
}

AsioLoop::~AsioLoop() {
  for (auto& [id, timer] : timers_) timer->cancel();
}

void AsioLoop::Post(std::function<void()> fn) { asio::post(io_, std::move(fn)); }

Loop::TimerId AsioLoop::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  TimerId id = next_++;
  auto& timer = timers_[id] = std::make_unique<asio::steady_timer>(io_, delay);
  timer->async_wait([this, id, fn = std::move(fn)](std::error_code ec) {
    if (ec) return;
    timers_.erase(id);
    fn();
  });
  return id;
}

void AsioLoop::Cancel(TimerId id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  it->second->cancel();
  timers_.erase(it);
}

}  // namespace trun::proc
