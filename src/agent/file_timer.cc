#include "agent/file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace trun::agent {
namespace {

using json = nlohmann::json;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Wakes read at most this much of the FIFO before letting the loop serve
// others: a client that writes without pause cannot starve the agent.
constexpr int kMaxReadsPerWake = 64;
constexpr int kMaxComplaints = 10;

}  // namespace

Result<TimerRequest> ParseTimerRequest(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("not a JSON object");
  if (j.contains("version") && j["version"] != 1) {
    return Status::InvalidArgument("\"version\" is not 1");
  }
  TimerRequest r;
  const auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<int64_t>() <= 0 ||
      pid->get<int64_t>() > std::numeric_limits<pid_t>::max()) {
    return Status::InvalidArgument("\"pid\" is not a process id");
  }
  r.pid = static_cast<pid_t>(pid->get<int64_t>());
  const auto scope = j.find("scope_id");
  if (scope == j.end() || !scope->is_string()) {
    return Status::InvalidArgument("\"scope_id\" is not a string");
  }
  r.scope_id = scope->get<std::string>();
  if (r.scope_id.size() > kMaxTimerScopeBytes) {
    return Status::InvalidArgument(
        fmt::format("\"scope_id\" is longer than {} bytes", kMaxTimerScopeBytes));
  }
  const auto exp = j.find("expiration_time");
  if (exp == j.end() || !exp->is_number() || !std::isfinite(exp->get<double>())) {
    return Status::InvalidArgument("\"expiration_time\" is not a number");
  }
  r.expiration_time = exp->get<double>();
  const auto sig = j.find("signal");
  if (sig == j.end() || !sig->is_number_integer() || sig->get<int64_t>() >= NSIG ||
      sig->get<int64_t>() < std::numeric_limits<int>::min()) {
    return Status::InvalidArgument("\"signal\" is not a signal number");
  }
  // torch: "a negative or zero signal will not kill the process".
  r.signal = std::max(0, static_cast<int>(sig->get<int64_t>()));
  return r;
}

TimerTable::Applied TimerTable::Apply(const TimerRequest& r) {
  Key key{r.pid, r.scope_id};
  auto it = by_key_.find(key);
  if (r.expiration_time < 0) {
    if (it == by_key_.end()) return Applied::kNotHeld;
    by_time_.erase({it->second.expiration_time, r.pid, r.scope_id});
    by_key_.erase(it);
    return Applied::kReleased;
  }
  if (it != by_key_.end()) {
    by_time_.erase({it->second.expiration_time, r.pid, r.scope_id});
    it->second = r;
  } else {
    if (by_key_.size() >= max_timers_) return Applied::kFull;
    by_key_.emplace(std::move(key), r);
  }
  by_time_.insert({r.expiration_time, r.pid, r.scope_id});
  return Applied::kSet;
}

std::optional<double> TimerTable::Earliest() const {
  if (by_time_.empty()) return std::nullopt;
  return std::get<0>(*by_time_.begin());
}

std::vector<TimerRequest> TimerTable::TakeExpired(double now) {
  std::map<pid_t, TimerRequest> chosen;
  for (auto it = by_time_.begin(); it != by_time_.end() && std::get<0>(*it) <= now; ++it) {
    const TimerRequest& t = by_key_.at({std::get<1>(*it), std::get<2>(*it)});
    auto [c, fresh] = chosen.try_emplace(t.pid, t);
    if (!fresh && c->second.signal == 0 && t.signal > 0) c->second = t;
  }
  std::vector<TimerRequest> out;
  for (auto& [pid, t] : chosen) {
    ClearPid(pid);
    out.push_back(std::move(t));
  }
  return out;
}

void TimerTable::ClearPid(pid_t pid) {
  auto it = by_key_.lower_bound({pid, std::string()});
  while (it != by_key_.end() && it->first.first == pid) {
    by_time_.erase({it->second.expiration_time, pid, it->first.second});
    it = by_key_.erase(it);
  }
}

void TimerTable::Clear() {
  by_key_.clear();
  by_time_.clear();
}

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path, Callbacks callbacks)
    : path_(std::move(path)), callbacks_(std::move(callbacks)), timer_(io) {}

Result<std::unique_ptr<FileTimerServer>> FileTimerServer::Start(asio::io_context& io,
                                                                std::string path,
                                                                Callbacks callbacks) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) {
      return Status::InvalidArgument(
          fmt::format("TORCHELASTIC_TIMER_FILE {}: exists and is not a FIFO; remove it or name "
                      "another path",
                      path));
    }
    ::unlink(path.c_str());
  }
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return Status::InvalidArgument(
        fmt::format("TORCHELASTIC_TIMER_FILE {}: cannot create the FIFO: {}; name a path in a "
                    "writable directory",
                    path, std::strerror(errno)));
  }
  // Read-write: the FIFO always has a writer (us), so it never reads as EOF
  // (which would wake the loop without end) and clients' non-blocking opens
  // always find a reader.
  int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    ::unlink(path.c_str());
    return Status::FromErrno("cannot open the watchdog FIFO " + path, err);
  }
  std::unique_ptr<FileTimerServer> s(
      new FileTimerServer(io, std::move(path), std::move(callbacks)));
  s->fd_ = fd;
  s->fifo_ = std::make_unique<asio::posix::stream_descriptor>(io, fd);
  s->WaitForLines();
  return s;
}

FileTimerServer::~FileTimerServer() {
  *alive_ = false;
  timer_.cancel();
  fifo_.reset();  // closes fd_
  ::unlink(path_.c_str());
}

void FileTimerServer::ClearPid(pid_t pid) {
  table_.ClearPid(pid);
  Arm();
}

void FileTimerServer::Clear() {
  table_.Clear();
  Arm();
}

FileTimerServer::Stats FileTimerServer::stats() const {
  Stats s = stats_;
  s.active = table_.size();
  return s;
}

void FileTimerServer::Complain(const std::string& what) {
  if (complaints_ > kMaxComplaints) return;
  if (++complaints_ > kMaxComplaints) {
    log::Warning("watchdog: further ignored requests are only counted ({})",
                 "trun_watchdog_requests_total");
    return;
  }
  log::Warning("watchdog: {}", what);
}

void FileTimerServer::WaitForLines() {
  fifo_->async_wait(asio::posix::stream_descriptor::wait_read,
                    [this, alive = alive_](std::error_code ec) {
                      if (ec || !*alive) return;
                      ReadLines();
                      WaitForLines();
                    });
}

void FileTimerServer::ReadLines() {
  char buf[16 * 1024];
  for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: all read (we hold a writer, so never EOF)
    std::string_view data(buf, static_cast<size_t>(n));
    while (!data.empty()) {
      size_t nl = data.find('\n');
      std::string_view piece = data.substr(0, nl);
      if (!skipping_ && partial_.size() + piece.size() > kMaxTimerLineBytes) {
        skipping_ = true;
        partial_.clear();
        ++stats_.malformed;
        Complain(
            fmt::format("ignored a request longer than {} bytes on {}", kMaxTimerLineBytes, path_));
      }
      if (!skipping_) partial_.append(piece);
      if (nl == std::string_view::npos) break;
      if (!skipping_ && !partial_.empty()) OnLine(partial_);
      partial_.clear();
      skipping_ = false;
      data.remove_prefix(nl + 1);
    }
  }
  Arm();
}

void FileTimerServer::OnLine(std::string_view line) {
  auto r = ParseTimerRequest(line);
  if (!r.ok()) {
    ++stats_.malformed;
    Complain(fmt::format("ignored a malformed request on {}: {}", path_, r.status().message()));
    return;
  }
  if (r->expiration_time >= 0 && !callbacks_.accepts(r->pid)) {
    ++stats_.rejected;
    Complain(
        fmt::format("ignored a timer of PID {}, which is none of this agent's workers", r->pid));
    return;
  }
  switch (table_.Apply(*r)) {
    case TimerTable::Applied::kSet:
      ++stats_.set;
      break;
    case TimerTable::Applied::kReleased:
      ++stats_.released;
      break;
    case TimerTable::Applied::kNotHeld:
      break;
    case TimerTable::Applied::kFull:
      ++stats_.rejected;
      Complain(
          fmt::format("{} timers are held already; ignored one of PID {}", kMaxTimers, r->pid));
      break;
  }
}

void FileTimerServer::Arm() {
  auto earliest = table_.Earliest();
  if (!earliest) {
    timer_.cancel();
    return;
  }
  // A deadline beyond a day is looked at again then, not converted into a
  // duration that could overflow.
  double delay = std::clamp(*earliest - WallNow(), 0.0, 86400.0);
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(delay)));
  timer_.async_wait([this, alive = alive_](std::error_code ec) {
    if (ec || !*alive) return;
    OnDeadline();
  });
}

void FileTimerServer::OnDeadline() {
  for (const TimerRequest& t : table_.TakeExpired(WallNow())) {
    ++stats_.expired;
    int error = 0;
    if (t.signal > 0) {
      // The pid may have exited and been reused since it set the timer.
      if (!callbacks_.accepts(t.pid)) {
        error = ESRCH;
      } else if (::kill(t.pid, t.signal) != 0) {
        error = errno;
      }
    }
    callbacks_.expired(t, WallNow(), error);
  }
  Arm();
}

}  // namespace trun::agent
