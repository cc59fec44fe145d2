// The local scheduler's supervisor: one detached process per app that runs
// its replicas, pumps their output into the log files, applies the retry
// policies and records every change in state.json.
//
// Its state machine, all on one asio event loop (SIGCHLD, the replicas'
// pipes, SIGTERM/SIGINT for cancel, the stop timer):
//
//   RUNNING --a replica exits 0----------------> (all exited 0) SUCCEEDED
//   RUNNING --a replica fails, retries left----> RESTARTING: stop what the
//             policy restarts, then start it again -> RUNNING
//   RUNNING --a replica fails, none left-------> FAILING: stop the rest -> FAILED
//   any     --SIGTERM or SIGINT (cancel)-------> CANCELLING: stop all -> CANCELLED
//
// Stopping is SIGTERM to each replica's process group, SIGKILL after the
// request's stop_timeout (proc::GroupSupervisor's rules); a second cancel
// SIGKILLs at once. Replicas that were stopped, not failed on their own, are
// CANCELLED. The app's root cause is chosen by failure::RootCause's rule.
#include "schedulers/local_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "common/exit_code.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "failure/failure.h"
#include "proc/exposure.h"
#include "proc/group_supervisor.h"
#include "proc/pipe_reader.h"
#include "proc/pump.h"
#include "proc/signals.h"
#include "schedulers/local_state.h"
#include "schedulers/scheduler.h"

namespace trun::schedulers {
namespace {

using specs::AppState;

struct Replica {
  size_t role = 0;
  size_t index = 0;  // in the app, role by role: the root cause's last tie-break
  const local::ReplicaRequest* req = nullptr;
  local::ReplicaState* state = nullptr;
  pid_t pid = -1;
  bool running = false;
  int attempt = 0;
  // Its last failure, for the root-cause rule.
  failure::FailureKey failure;
  int out_file = -1, err_file = -1, combined_file = -1;
  std::shared_ptr<proc::PipeReader> out = std::make_shared<proc::PipeReader>();
  std::shared_ptr<proc::PipeReader> err = std::make_shared<proc::PipeReader>();
};

class Supervisor {
 public:
  Supervisor(std::string dir, local::Request req, local::State st,
             const proc::ProcessTableFactory& make_table)
      : dir_(std::move(dir)),
        req_(std::move(req)),
        st_(std::move(st)),
        make_table_(make_table),
        signals_(io_, SIGTERM, SIGINT),
        drain_timer_(io_) {}

  int Run(int ready_fd) {
    // The job token came in the environment (StartSupervisor); it goes on
    // to each replica's, but no longer sits in this process's environment
    // or memory where the replicas' workers, the same user, could read it
    // (proc/exposure.h).
    if (const char* token = std::getenv(kJobTokenEnv); token && *token) {
      job_token_ = token;
      proc::ForgetEnvironmentVariable(kJobTokenEnv);
      if (Status s = proc::MakeUndumpable(); !s.ok()) log::Warning("supervisor: {}", s.message());
    }
    auto table = make_table_(io_);
    if (!table.ok()) return ReportError(table.status());
    table_ = std::move(*table);
    groups_.emplace(
        *table_, loop_,
        proc::GroupSupervisor::Hooks{.on_exit = [this](const proc::GroupExit& e) { OnExit(e); },
                                     .after_exits = [this] { Evaluate(); },
                                     .on_grace_expired = {}});
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    devnull_ = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    st_.supervisor_pid = ::getpid();
    st_.supervisor_start = local::ProcessStartTime(::getpid());
    st_.state = AppState::kPending;
    Save();
    if (ready_fd >= 0) {
      char ok = 'R';
      (void)!::write(ready_fd, &ok, 1);
      ::close(ready_fd);
    }
    for (size_t r = 0; r < req_.roles.size(); ++r) {
      for (size_t k = 0; k < req_.roles[r].replicas.size(); ++k) {
        Replica rep;
        rep.role = r;
        rep.req = &req_.roles[r].replicas[k];
        rep.state = &st_.roles[r].replicas[k];
        rep.index = replicas_.size();
        replicas_.push_back(std::move(rep));
      }
    }
    WatchSignals();
    for (auto& rep : replicas_) Start(rep);
    phase_ = Phase::kRunning;
    st_.state = AppState::kRunning;
    Save();
    Evaluate();
    if (phase_ != Phase::kDone) io_.run();
    log::Info("app {} ended {}", st_.app_id, specs::AppStateName(st_.state));
    return kExitSuccess;
  }

 private:
  enum class Phase { kStarting, kRunning, kRestarting, kFailing, kCancelling, kDone };

  // ---- replicas ---------------------------------------------------------------

  void Start(Replica& rep) {
    ++rep.attempt;
    const auto& req = *rep.req;
    // A restarted replica keeps its predecessor's error file under another name.
    std::string err = req.ErrorFile();
    if (rep.attempt > 1 && ::access(err.c_str(), F_OK) == 0) {
      std::rename(err.c_str(),
                  fmt::format("{}/error.{}.json", req.log_dir, rep.attempt - 1).c_str());
    }
    rep.state->structured_error_msg = std::string(specs::kNone);
    rep.state->exitcode.reset();
    Status s = Spawn(rep);
    if (!s.ok()) {
      const std::string line = log::Format(log::Level::kError, s.message(), /*each_line=*/true);
      if (rep.combined_file >= 0) (void)proc::WriteAll(rep.combined_file, line);
      if (rep.err_file >= 0) (void)proc::WriteAll(rep.err_file, line);
      log::Error("{}/{}: {}", req_.roles[rep.role].name, req.id, s.message());
      rep.state->state = AppState::kFailed;
      rep.state->exitcode = 127;
      rep.failure = {.timestamp = static_cast<int64_t>(local::Now()), .rank = failures_seen_++};
      failure_msgs_[&rep] = s.message();
      pending_failures_.push_back(&rep);
      return;
    }
    rep.state->state = AppState::kRunning;
  }

  Status Spawn(Replica& rep) {
    const auto& req = *rep.req;
    auto open_log = [&](const char* name, int& fd) -> Status {
      if (fd >= 0) return Status::OK();
      std::string path = req.log_dir + "/" + name;
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, local::kPrivateFile);
      if (fd >= 0) (void)::fchmod(fd, local::kPrivateFile);  // whatever the umask
      return fd < 0 ? Status::FromErrno("cannot open " + path, errno) : Status::OK();
    };
    TRUN_RETURN_IF_ERROR(open_log("stdout.log", rep.out_file));
    TRUN_RETURN_IF_ERROR(open_log("stderr.log", rep.err_file));
    TRUN_RETURN_IF_ERROR(open_log("combined.log", rep.combined_file));
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return Status::FromErrno("pipe", e);
    }
    proc::SpawnOptions o;
    o.argv = req.argv;
    o.env = proc::EnvironWith(req.env);
    // Only a role that runs trun's agent needs the token; any other role's
    // program never sees it.
    if (!job_token_.empty() && req_.roles[rep.role].job_token) {
      o.env.push_back(std::string(kJobTokenEnv) + "=" + job_token_);
    }
    o.stdin_fd = devnull_;
    o.stdout_fd = out_pipe[1];
    o.stderr_fd = err_pipe[1];
    auto pid = groups_->Start(o);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (!pid.ok()) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      return pid.status();
    }
    rep.pid = *pid;
    rep.running = true;
    rep.state->pid = *pid;
    rep.out = NewLogReader(out_pipe[0], rep.combined_file, rep.out_file);
    rep.err = NewLogReader(err_pipe[0], rep.combined_file, rep.err_file);
    return Status::OK();
  }

  // stdout.log / stderr.log get the bytes as they come, combined.log whole
  // lines of both streams, so lines of the two never mix.
  std::shared_ptr<proc::PipeReader> NewLogReader(int fd, int combined_fd, int file_fd) {
    auto s = std::make_shared<proc::PipeReader>();
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    s->fd = fd;
    s->pump = std::make_unique<proc::LinePump>("", combined_fd, file_fd);
    proc::WatchPipe(io_, s, [this] { MaybeExit(); });
    return s;
  }

  // ---- events -----------------------------------------------------------------

  void WatchSignals() {
    signals_.async_wait([this](std::error_code ec, int sig) {
      if (ec) return;
      OnCancel(sig);
      if (phase_ != Phase::kDone || !exited_) WatchSignals();
    });
  }

  void OnExit(const proc::GroupExit& e) {
    Replica* found = nullptr;
    for (auto& r : replicas_) {
      if (r.running && r.pid == e.pid) found = &r;
    }
    if (!found) return;
    Replica& rep = *found;
    rep.running = false;
    const int code = e.exitcode;
    rep.state->exitcode = code;
    proc::DrainPipe(*rep.out);
    proc::DrainPipe(*rep.err);
    // Whatever the replica left in its group (a shell's children) goes too.
    groups_->Release(rep.pid);
    const std::string name = fmt::format("{}/{}", req_.roles[rep.role].name, rep.req->id);
    std::string error;
    std::optional<int64_t> written_at;
    int64_t written_ns = 0;
    if (code != 0) {
      auto file = failure::ReadErrorFile(rep.req->ErrorFile());
      if (file.ok()) {
        error = std::string(Trim(file->json));
        written_at = file->timestamp;
        written_ns = file->written_ns;
      } else if (file.status().code() != StatusCode::kNotFound) {
        log::Warning("{}", file.status().message());
      }
    }
    // A replica being stopped that wrote an error file failed on its own
    // before the stop reached it (another replica's exit came first).
    if (code == 0 && !e.stopped) {
      rep.state->state = AppState::kSucceeded;
    } else if (e.stopped && error.empty()) {
      rep.state->state = AppState::kCancelled;
    } else {
      rep.state->state = AppState::kFailed;
      if (!error.empty()) rep.state->structured_error_msg = error;
      rep.failure = {.timestamp = written_at.value_or(static_cast<int64_t>(local::Now())),
                     .has_error_file = !error.empty(),
                     .rank = failures_seen_++,
                     .written_ns = written_ns};
      failure_msgs_[&rep] =
          code < 0 ? fmt::format("replica {} was killed by {}", name, proc::SignalName(-code))
                   : fmt::format("replica {} exited with {}", name, code);
      log::Warning("{}", failure_msgs_[&rep]);
      pending_failures_.push_back(&rep);
    }
    Save();
  }

  // Decides what the exits so far mean, in the order they happened.
  void Evaluate() {
    while (!pending_failures_.empty()) {
      Replica* rep = pending_failures_.front();
      pending_failures_.erase(pending_failures_.begin());
      OnFailure(*rep);
    }
    if (phase_ == Phase::kRunning) {
      bool all_done = true;
      for (const auto& rep : replicas_) all_done &= rep.state->state == AppState::kSucceeded;
      if (all_done) Finish(AppState::kSucceeded, "");
    }
    MaybeExit();
  }

  void OnFailure(Replica& rep) {
    // While failing, a later failure may be dated earlier, or bring the
    // error file the first one lacked.
    if (phase_ == Phase::kFailing) {
      failing_.push_back(&rep);
      if (RootCauseNow() == &rep) {
        st_.msg = failure_msgs_[&rep];
        st_.structured_error_msg = rep.state->structured_error_msg;
      }
    }
    if (phase_ != Phase::kRunning) return;
    const auto& role_req = req_.roles[rep.role];
    auto& role_st = st_.roles[rep.role];
    st_.structured_error_msg = std::string(specs::kNone);
    if (role_st.restarts >= role_req.max_retries) {
      failing_ = {&rep};
      st_.structured_error_msg = rep.state->structured_error_msg;
      st_.msg = failure_msgs_[&rep] + (role_req.max_retries > 0
                                           ? fmt::format("; role {} has used its {} retries",
                                                         role_req.name, role_req.max_retries)
                                           : "");
      phase_ = Phase::kFailing;
      Stop(AllRunning(), [this] { Finish(AppState::kFailed, st_.msg); });
      return;
    }
    ++role_st.restarts;
    ++st_.num_restarts;
    // Until the restarted replicas fail again, the status says why they
    // were restarted.
    st_.structured_error_msg = rep.state->structured_error_msg;
    std::vector<Replica*> restart;
    switch (role_req.retry_policy) {
      case specs::RetryPolicy::kReplica:
        restart = {&rep};
        break;
      case specs::RetryPolicy::kRole:
        for (auto& r : replicas_) {
          if (r.role == rep.role) restart.push_back(&r);
        }
        break;
      case specs::RetryPolicy::kApplication:
        for (auto& r : replicas_) restart.push_back(&r);
        break;
    }
    st_.msg = fmt::format("{}; retry {} of {} ({} policy)", failure_msgs_[&rep], role_st.restarts,
                          role_req.max_retries, specs::RetryPolicyName(role_req.retry_policy));
    log::Warning("{}", st_.msg);
    std::vector<Replica*> to_stop;
    for (auto* r : restart) {
      if (r->running) to_stop.push_back(r);
    }
    phase_ = Phase::kRestarting;
    Stop(to_stop, [this, restart] {
      phase_ = Phase::kRunning;
      for (auto* r : restart) Start(*r);
      Save();
      Evaluate();
    });
  }

  // The root cause among the failures since the app began failing.
  const Replica* RootCauseNow() const {
    std::vector<failure::FailureKey> keys;
    for (const Replica* r : failing_) keys.push_back(r->failure);
    return failing_[failure::RootCause(keys)];
  }

  void OnCancel(int sig) {
    if (phase_ == Phase::kDone) return;
    if (phase_ == Phase::kCancelling) {
      log::Warning("received {} again; killing the replicas now", proc::SignalName(sig));
      groups_->KillStopping();
      return;
    }
    log::Info("received {}; cancelling the app", proc::SignalName(sig));
    phase_ = Phase::kCancelling;
    st_.msg = "cancelled";
    pending_failures_.clear();
    Stop(AllRunning(), [this] {
      for (auto& r : replicas_) {
        if (!specs::IsTerminal(r.state->state)) r.state->state = AppState::kCancelled;
      }
      Finish(AppState::kCancelled, "cancelled");
    });
  }

  std::vector<Replica*> AllRunning() {
    std::vector<Replica*> out;
    for (auto& r : replicas_) {
      if (r.running) out.push_back(&r);
    }
    return out;
  }

  // SIGTERM to each replica's group, SIGKILL after the stop timeout; `then`
  // runs once they have all exited. A later Stop joins the one under way.
  void Stop(const std::vector<Replica*>& reps, std::function<void()> then) {
    std::vector<pid_t> pids;
    for (auto* r : reps) pids.push_back(r->pid);
    groups_->Stop(pids, SIGTERM,
                  std::chrono::milliseconds(static_cast<long long>(req_.stop_timeout_s * 1000)),
                  std::move(then));
    Save();
  }

  void Finish(AppState state, const std::string& msg) {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    st_.state = state;
    st_.msg = msg;
    if (state == AppState::kSucceeded) st_.structured_error_msg = std::string(specs::kNone);
    pending_failures_.clear();
    MaybeExit();
  }

  // Once the app is decided and every pipe is drained, the final state is
  // written and the loop ends: a reader that sees a terminal state finds
  // every log line in the files.
  void MaybeExit() {
    if (phase_ != Phase::kDone || exited_) return;
    bool open = false;
    for (auto& r : replicas_) {
      if (r.running) return;
      open |= r.out->fd >= 0 || r.err->fd >= 0;
    }
    if (open) {
      // A process that left its replica's group may hold a pipe open for
      // ever: what it has written by now is kept, the rest is not waited for.
      if (!draining_) {
        draining_ = true;
        drain_timer_.expires_after(std::chrono::seconds(2));
        drain_timer_.async_wait([this](std::error_code ec) {
          if (ec) return;
          for (auto& r : replicas_) {
            proc::DrainPipe(*r.out);
            proc::DrainPipe(*r.err);
            proc::ClosePipe(*r.out);
            proc::ClosePipe(*r.err);
          }
          MaybeExit();
        });
      }
      return;
    }
    exited_ = true;
    // Processes that left their replica's group were reparented to us (a
    // subreaper); nothing of the app outlives it.
    for (pid_t pid : groups_->KillOrphans()) {
      log::Warning("killed pid {}, left behind by a replica", pid);
    }
    st_.finished_at = local::Now();
    Save();
    signals_.cancel();
    drain_timer_.cancel();
    io_.stop();
  }

  void Save() {
    Status s = local::WriteState(dir_, st_);
    if (!s.ok()) log::Error("{}", s.message());
  }

  std::string dir_;
  std::string job_token_;  // "" when the job has none; never logged
  local::Request req_;
  local::State st_;
  proc::ProcessTableFactory make_table_;
  asio::io_context io_{1};
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  proc::AsioLoop loop_{io_};
  std::unique_ptr<proc::ProcessTable> table_;
  std::optional<proc::GroupSupervisor> groups_;
  std::vector<Replica> replicas_;
  Phase phase_ = Phase::kStarting;
  bool exited_ = false;
  bool draining_ = false;
  // The failures since the app began failing (retries spent).
  std::vector<const Replica*> failing_;
  std::vector<Replica*> pending_failures_;
  std::map<const Replica*, std::string> failure_msgs_;
  // The order in which failures were seen: within one second (the error
  // files' resolution), the one seen first is the root cause, not the
  // lower replica. A replica whose workers failed because another's died
  // (gloo's "Connection closed by peer") is seen after that one.
  int failures_seen_ = 0;
  int devnull_ = -1;
};

}  // namespace

int RunLocalSupervisor(const std::string& app_dir, int ready_fd) {
  return RunLocalSupervisor(
      app_dir, ready_fd, [](asio::io_context& io) -> Result<std::unique_ptr<proc::ProcessTable>> {
        auto table = proc::SystemProcessTable::Start(io);
        if (!table.ok()) return table.status();
        return std::unique_ptr<proc::ProcessTable>(std::move(*table));
      });
}

int RunLocalSupervisor(const std::string& app_dir, int ready_fd,
                       const proc::ProcessTableFactory& make_table) {
  auto text = ReadFile(app_dir + "/request.json");
  // The submitter wrote these files: a problem with them is trun's, not the
  // user's.
  if (!text.ok()) return ReportError(Status::Internal(text.status().message()));
  auto req = local::RequestFromJson(nlohmann::json::parse(*text, nullptr, false));
  auto st = local::ReadState(app_dir);
  if (!req.ok()) return ReportError(Status::Internal(req.status().message()));
  if (!st.ok()) return ReportError(Status::Internal(st.status().message()));
  Supervisor sup(app_dir, std::move(*req), std::move(*st), make_table);
  return sup.Run(ready_fd);
}

}  // namespace trun::schedulers
