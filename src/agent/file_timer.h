// The worker watchdog: a timer server for torch's FileTimerClient
// (torch/distributed/elastic/timer/file_based_local_timer.py), started by
// TORCHELASTIC_ENABLE_FILE_TIMER=1 as torchrun's agent does.
//
// Workers reach it through a FIFO (TORCHELASTIC_TIMER_FILE). The client
// opens it write-only and non-blocking (so the open fails unless a reader
// holds it: the server keeps it open, read-write, for its whole life), writes
// one line in one write(2), and closes it. A line:
//
//   line    = object LF                 ; at most kMaxTimerLineBytes
//   object  = a JSON object with
//             "pid"             integer > 0   the process to signal
//             "scope_id"        string        names the timer, with pid
//             "expiration_time" number        wall-clock seconds since the epoch;
//                                             negative: release (pid, scope_id)
//             "signal"          integer >= 0  sent on expiry; 0: none
//             "version"         1             optional; other keys are ignored
//
// Semantics, torch's FileTimerServer's without its 0.1 s polling: a timer
// (pid, scope_id) is set or replaced by each request; when timers of a pid
// have expired, the earliest of them that names a signal is acted on (the
// signal is sent to that pid, not its group), and every timer of the pid is
// dropped. An expired timer with signal 0 only drops the pid's timers.
// Where torch polls, an asio timer waits for the earliest deadline, so a
// worker is signalled when its timer expires.
//
// Unlike torch, a timer is held only for a process the agent accepts (its
// workers and their process groups): anyone who can write the FIFO can
// otherwise make the agent kill any process it may signal. The FIFO is
// created mode 0600.
//
// Thread-safety: ParseTimerRequest and TimerTable are plain values and pure
// functions; FileTimerServer runs on its io_context's one thread.
#pragma once

#include <sys/types.h>

#include <asio.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun::agent {

// torch's client refuses requests over PIPE_BUF; twice that is generous.
inline constexpr size_t kMaxTimerLineBytes = 8192;
inline constexpr size_t kMaxTimerScopeBytes = 1024;
// Timers held at once, over all workers: bounds what a runaway client costs.
inline constexpr size_t kMaxTimers = 16384;

struct TimerRequest {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // < 0: release
  int signal = 0;
};

// One line, without its LF. Errors say which field is wrong.
Result<TimerRequest> ParseTimerRequest(std::string_view line);

// The timers held, by (pid, scope_id) and by expiration.
class TimerTable {
 public:
  enum class Applied { kSet, kReleased, kNotHeld, kFull };

  explicit TimerTable(size_t max_timers = kMaxTimers) : max_timers_(max_timers) {}

  Applied Apply(const TimerRequest& r);
  std::optional<double> Earliest() const;
  // For each pid with a timer expired at `now`: the timer to act on (the
  // earliest expired one with a signal, else the earliest, with signal 0);
  // every timer of those pids is dropped.
  std::vector<TimerRequest> TakeExpired(double now);
  void ClearPid(pid_t pid);
  void Clear();
  size_t size() const { return by_key_.size(); }

 private:
  using Key = std::pair<pid_t, std::string>;
  size_t max_timers_;
  std::map<Key, TimerRequest> by_key_;
  std::set<std::tuple<double, pid_t, std::string>> by_time_;
};

class FileTimerServer {
 public:
  struct Callbacks {
    // Whether timers of `pid` may be held and acted on.
    std::function<bool(pid_t)> accepts;
    // `timer` expired; `timer.signal` (when not 0) was sent to its pid at
    // `sent_at` (wall-clock seconds), with `error` the errno of kill (0: sent).
    std::function<void(const TimerRequest& timer, double sent_at, int error)> expired;
  };
  struct Stats {
    uint64_t set = 0;
    uint64_t released = 0;
    uint64_t rejected = 0;   // a pid not accepted, or the table full
    uint64_t malformed = 0;  // lines that are not requests
    uint64_t expired = 0;
    size_t active = 0;
  };

  // Creates the FIFO at `path` (an existing FIFO there is replaced; any
  // other file is an InvalidArgument naming it) and serves it.
  static Result<std::unique_ptr<FileTimerServer>> Start(asio::io_context& io, std::string path,
                                                        Callbacks callbacks);
  // Removes the FIFO.
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  // Drops the timers of one process, or of all (a worker exited; an
  // attempt ended).
  void ClearPid(pid_t pid);
  void Clear();
  Stats stats() const;

 private:
  FileTimerServer(asio::io_context& io, std::string path, Callbacks callbacks);
  void WaitForLines();
  void ReadLines();
  void OnLine(std::string_view line);
  void Arm();
  void OnDeadline();
  // Logs the first few ignored requests; the rest are only counted.
  void Complain(const std::string& what);

  std::string path_;
  Callbacks callbacks_;
  int fd_ = -1;
  std::unique_ptr<asio::posix::stream_descriptor> fifo_;
  asio::steady_timer timer_;
  TimerTable table_;
  std::string partial_;    // a line not yet ended
  bool skipping_ = false;  // inside a line over the limit
  Stats stats_;
  int complaints_ = 0;
  // Shared with pending handlers, which may outlive the server.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace trun::agent
