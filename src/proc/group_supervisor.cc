#include "proc/group_supervisor.h"

#include <signal.h>

namespace trun::proc {

GroupSupervisor::GroupSupervisor(ProcessTable& table, Loop& loop, Hooks hooks)
    : table_(table), loop_(loop), hooks_(std::move(hooks)) {
  table_.WatchExits([this] { OnChildExited(); });
}

GroupSupervisor::~GroupSupervisor() {
  if (stop_ && stop_->grace_timer) loop_.Cancel(stop_->grace_timer);
}

Result<pid_t> GroupSupervisor::Start(const SpawnOptions& options) {
  SpawnOptions o = options;
  o.new_process_group = true;
  auto pid = table_.Spawn(o);
  if (pid.ok()) groups_[*pid] = Group{};
  return pid;
}

void GroupSupervisor::OnChildExited() {
  while (auto exit = table_.Reap()) {
    auto it = groups_.find(exit->pid);
    // Anything else is an orphan reparented to us: reaping it is all.
    if (it == groups_.end() || !it->second.running) continue;
    it->second.running = false;
    if (hooks_.on_exit) hooks_.on_exit({exit->pid, exit->exitcode, it->second.stopping});
  }
  if (hooks_.after_exits) hooks_.after_exits();
  MaybeStopped();
}

void GroupSupervisor::Stop(const std::vector<pid_t>& groups, int sig,
                           std::chrono::milliseconds grace, std::function<void()> then) {
  for (pid_t pid : groups) {
    auto it = groups_.find(pid);
    if (it == groups_.end() || !it->second.running || it->second.stopping) continue;
    it->second.stopping = true;
    table_.SignalGroup(pid, sig);
  }
  const bool joining = stop_.has_value();
  // Assigned, not emplace()d: clang 14 (the sanitizer tree's compiler)
  // does not see PendingStop as default-constructible inside this class.
  if (!joining) stop_ = PendingStop{};
  stop_->then = std::move(then);
  if (!joining && sig != SIGKILL) {
    stop_->grace_timer = loop_.After(grace, [this] {
      stop_->grace_timer = 0;
      if (hooks_.on_grace_expired) hooks_.on_grace_expired();
      KillStopping();
    });
  }
  // Nothing to wait for: go on from the loop, not from inside this call.
  loop_.Post([this] { MaybeStopped(); });
}

void GroupSupervisor::StopAll(int sig, std::chrono::milliseconds grace,
                              std::function<void()> then) {
  std::vector<pid_t> all;
  for (const auto& [pid, g] : groups_) {
    if (g.running) all.push_back(pid);
  }
  Stop(all, sig, grace, std::move(then));
}

void GroupSupervisor::KillStopping() {
  for (const auto& [pid, g] : groups_) {
    if (g.running && g.stopping) table_.SignalGroup(pid, SIGKILL);
  }
}

void GroupSupervisor::MaybeStopped() {
  if (!stop_) return;
  for (const auto& [pid, g] : groups_) {
    if (g.running && g.stopping) return;
  }
  if (stop_->grace_timer) loop_.Cancel(stop_->grace_timer);
  auto then = std::move(stop_->then);
  stop_.reset();
  if (then) then();
}

void GroupSupervisor::Release(pid_t pid) {
  auto it = groups_.find(pid);
  if (it == groups_.end()) return;
  table_.SignalGroup(pid, SIGKILL);
  table_.Forget(pid);
  groups_.erase(it);
}

std::vector<pid_t> GroupSupervisor::KillOrphans() {
  std::vector<pid_t> killed = table_.KillChildren();
  for (pid_t pid : killed) groups_.erase(pid);
  return killed;
}

bool GroupSupervisor::running(pid_t pid) const {
  auto it = groups_.find(pid);
  return it != groups_.end() && it->second.running;
}

int GroupSupervisor::live() const {
  int n = 0;
  for (const auto& [pid, g] : groups_) n += g.running ? 1 : 0;
  return n;
}

}  // namespace trun::proc
