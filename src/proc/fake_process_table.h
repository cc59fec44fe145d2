// Fakes of process_table.h's seams for unit tests: a process table whose
// processes do what the test says, a loop whose clock moves only when the
// test advances it, and one whose clock jumps to each timer's deadline.
//
// Thread-safety: none; one test thread.
#pragma once

#include <signal.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proc/process_table.h"

namespace trun::proc {

class FakeProcessTable final : public ProcessTable {
 public:
  struct Process {
    SpawnOptions options;
    bool alive = true;
    bool ignores_sigterm = false;  // only SIGKILL ends it
    std::vector<int> signals;      // what its group was sent, in order
  };

  // The next Spawn fails with this status, once.
  void FailNextSpawn(Status s) { spawn_error_ = std::move(s); }
  // Processes spawned from now on ignore SIGTERM.
  void set_ignore_sigterm(bool v) { ignore_sigterm_ = v; }
  // This one does.
  void IgnoreSigterm(pid_t pid) { processes_.at(pid).ignores_sigterm = true; }
  // Told of each spawn, once the process exists: a test scripts its life
  // here (Exit, set_ignore_sigterm for the next ones).
  void set_on_spawn(std::function<void(pid_t, const SpawnOptions&)> fn) {
    on_spawn_ = std::move(fn);
  }
  // WhenReady hands its callback to `fn` instead of calling it at once, as
  // a warm process still importing would make the agent wait.
  void set_when_ready(std::function<void(std::function<void()>)> fn) {
    when_ready_ = std::move(fn);
  }
  // Exits are delivered on their own through `post` (an event loop's),
  // as SIGCHLD would be, instead of at Deliver().
  void set_auto_deliver(std::function<void(std::function<void()>)> post) {
    post_ = std::move(post);
  }

  Result<pid_t> Spawn(const SpawnOptions& options) override {
    if (!spawn_error_.ok()) return std::exchange(spawn_error_, Status::OK());
    pid_t pid = next_pid_++;
    processes_[pid] = Process{options, true, ignore_sigterm_, {}};
    spawned_.push_back(pid);
    if (on_spawn_) on_spawn_(pid, options);
    return pid;
  }
  void SignalGroup(pid_t pgid, int sig) override {
    auto it = processes_.find(pgid);
    if (it == processes_.end()) return;
    it->second.signals.push_back(sig);
    if (!it->second.alive || sig == 0) return;
    if (sig == SIGKILL || !it->second.ignores_sigterm) Exit(pgid, -sig);
  }
  void Forget(pid_t pgid) override { forgotten_.push_back(pgid); }
  std::optional<ChildExit> Reap() override {
    if (exited_.empty()) return std::nullopt;
    ChildExit e = exited_.front();
    exited_.pop_front();
    return e;
  }
  void WatchExits(std::function<void()> on_exit) override { on_exit_ = std::move(on_exit); }
  void WhenReady(std::function<void()> ready) override {
    if (!when_ready_) return ready();
    when_ready_(std::move(ready));
  }
  std::vector<pid_t> KillChildren() override {
    std::vector<pid_t> killed = std::move(orphans_);
    orphans_.clear();
    for (auto& [pid, p] : processes_) {
      if (p.alive) {
        p.alive = false;
        killed.push_back(pid);
      }
    }
    exited_.clear();
    return killed;
  }

  // The process ends with `exitcode` (minus a signal); the supervisor hears
  // of it at the next Deliver().
  void Exit(pid_t pid, int exitcode) {
    auto it = processes_.find(pid);
    if (it == processes_.end() || !it->second.alive) return;
    it->second.alive = false;
    exited_.push_back({pid, exitcode});
    if (post_) post_([this] { Deliver(); });
  }
  // A descendant that left its group and was reparented to us.
  void AddOrphan(pid_t pid) { orphans_.push_back(pid); }
  // SIGCHLD: the watcher is told.
  void Deliver() {
    if (on_exit_) on_exit_();
  }

  const Process& process(pid_t pid) const { return processes_.at(pid); }
  // A spawned process's environment variable, "" when unset.
  std::string env(pid_t pid, const std::string& key) const {
    for (const auto& kv : processes_.at(pid).options.env) {
      if (kv.starts_with(key + "=")) return kv.substr(key.size() + 1);
    }
    return "";
  }
  const std::vector<pid_t>& spawned() const { return spawned_; }
  const std::vector<pid_t>& forgotten() const { return forgotten_; }
  bool alive(pid_t pid) const { return processes_.at(pid).alive; }

 private:
  pid_t next_pid_ = 100;
  bool ignore_sigterm_ = false;
  Status spawn_error_;
  std::map<pid_t, Process> processes_;
  std::vector<pid_t> spawned_;
  std::vector<pid_t> forgotten_;
  std::vector<pid_t> orphans_;
  std::deque<ChildExit> exited_;
  std::function<void()> on_exit_;
  std::function<void(pid_t, const SpawnOptions&)> on_spawn_;
  std::function<void(std::function<void()>)> post_;
  std::function<void(std::function<void()>)> when_ready_;
};

class FakeLoop final : public Loop {
 public:
  void Post(std::function<void()> fn) override { posted_.push_back(std::move(fn)); }
  TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) override {
    TimerId id = next_++;
    timers_[id] = {now_ + delay, std::move(fn)};
    return id;
  }
  void Cancel(TimerId id) override { timers_.erase(id); }

  // Runs what was posted, including what that posts.
  void RunPosted() {
    while (!posted_.empty()) {
      auto fn = std::move(posted_.front());
      posted_.pop_front();
      fn();
    }
  }
  // Moves the clock on, firing due timers in order, then runs what they posted.
  void Advance(std::chrono::milliseconds by) {
    now_ += by;
    while (true) {
      auto due = std::min_element(timers_.begin(), timers_.end(), [](const auto& a, const auto& b) {
        return a.second.first < b.second.first;
      });
      if (due == timers_.end() || due->second.first > now_) break;
      auto fn = std::move(due->second.second);
      timers_.erase(due);
      fn();
    }
    RunPosted();
  }
  size_t pending_timers() const { return timers_.size(); }

 private:
  std::chrono::milliseconds now_{0};
  TimerId next_ = 1;
  std::deque<std::function<void()>> posted_;
  std::map<TimerId, std::pair<std::chrono::milliseconds, std::function<void()>>> timers_;
};

// A virtual clock on a real event loop: each timer fires as soon as the loop
// comes to it, in deadline order, and the clock jumps to its deadline. For
// code that runs its own loop (the agent), so a ten-minute grace takes no
// time and the test can check what was asked for.
class VirtualLoop final : public Loop {
 public:
  explicit VirtualLoop(asio::io_context& io) : io_(io) {}
  void Post(std::function<void()> fn) override { asio::post(io_, std::move(fn)); }
  TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) override {
    TimerId id = next_++;
    timers_[id] = {now_ + delay, std::move(fn)};
    delays_.push_back(delay);
    asio::post(io_, [this] { FireEarliest(); });
    return id;
  }
  void Cancel(TimerId id) override { timers_.erase(id); }

  std::chrono::milliseconds now() const { return now_; }
  // Every delay asked for, in order.
  const std::vector<std::chrono::milliseconds>& delays() const { return delays_; }

 private:
  void FireEarliest() {
    auto due = std::min_element(timers_.begin(), timers_.end(), [](const auto& a, const auto& b) {
      return a.second.first < b.second.first;
    });
    if (due == timers_.end()) return;
    now_ = std::max(now_, due->second.first);
    auto fn = std::move(due->second.second);
    timers_.erase(due);
    fn();
  }

  asio::io_context& io_;
  std::chrono::milliseconds now_{0};
  TimerId next_ = 1;
  std::vector<std::chrono::milliseconds> delays_;
  std::map<TimerId, std::pair<std::chrono::milliseconds, std::function<void()>>> timers_;
};

}  // namespace trun::proc
