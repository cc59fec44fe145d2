#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <tuple>

#include "agent/failure.h"
#include "agent/file_timer.h"
#include "agent/telemetry.h"
#include "common/log.h"
#include "common/net.h"
#include "common/strings.h"
#include "proc/pipe_reader.h"
#include "proc/pump.h"
#include "proc/sentinel.h"
#include "proc/signals.h"
#include "proc/spawn.h"
#include "rendezvous/rendezvous.h"

extern char** environ;

namespace trun::agent {
namespace {

namespace fs = std::filesystem;
using launch::LaunchConfig;
using launch::Std;

// How much of a failed worker's stderr is searched for a known error.
constexpr size_t kStderrTail = 8192;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// torch's log-dir naming: "<prefix><8 random chars>", created exclusively.
Result<std::string> MakeUniqueDir(const std::string& parent, const std::string& prefix) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<size_t> pick(0, sizeof kChars - 2);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = prefix;
    for (int i = 0; i < 8; ++i) name += kChars[pick(gen)];
    std::string path = parent + "/" + name;
    if (::mkdir(path.c_str(), 0700) == 0) return path;
    if (errno != EEXIST) return Status::FromErrno("cannot create " + path, errno);
  }
  return Status::IOError("cannot create a unique directory in " + parent);
}

// The short host name, as torch's ${hostname} (socket.gethostname()).
std::string ShortHostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// torch's string.Template.safe_substitute over the names it offers.
std::string SubstitutePrefix(std::string tmpl, const std::string& role, int local_rank, int rank,
                             const std::string& hostname) {
  const std::pair<std::string, std::string> vars[] = {{"role_name", role},
                                                      {"local_rank", std::to_string(local_rank)},
                                                      {"rank", std::to_string(rank)},
                                                      {"hostname", hostname}};
  for (const auto& [name, value] : vars) {
    for (const std::string& form : {"${" + name + "}", "$" + name}) {
      size_t pos = 0;
      while ((pos = tmpl.find(form, pos)) != std::string::npos) {
        // "$rank" must not eat the start of "$rank_x".
        size_t after = pos + form.size();
        if (form[1] != '{' && after < tmpl.size() &&
            (std::isalnum(static_cast<unsigned char>(tmpl[after])) || tmpl[after] == '_')) {
          pos = after;
          continue;
        }
        tmpl.replace(pos, form.size(), value);
        pos += value.size();
      }
    }
  }
  return tmpl;
}

// One worker stream read through a pipe by the event loop.
using Stream = proc::PipeReader;

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exitcode = 0;  // exit code, or -signal; valid once !running
  int64_t exited_at = 0;
  bool stopped = false;  // exited after the agent asked it to stop
  std::string watchdog;  // the expired timer the watchdog acted on, if it did
  std::string error_file;
  std::string stderr_log;  // the file its stderr goes to straight, if it does
  // Shared with pending read handlers, which may outlive the attempt.
  std::shared_ptr<Stream> out = std::make_shared<Stream>();
  std::shared_ptr<Stream> err = std::make_shared<Stream>();
  std::vector<int> owned_fds;  // log files, closed with the attempt
};

}  // namespace

class LocalAgent::Impl {
 public:
  explicit Impl(LaunchConfig config)
      : config_(std::move(config)), signals_(io_), grace_timer_(io_) {}

  int Run() {
    Status s = Setup();
    if (!s.ok()) {
      log::Error("{}", s.message());
      exit_code_ = s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitLaunchError;
      telemetry_.Shutdown(exit_code_);
      return exit_code_;
    }
    WatchSignals();
    telemetry_.AgentStarted(timers_ ? timers_->path() : "");
    telemetry_.RendezvousStarted();
    s = rdzv_->Start({[this](Result<rendezvous::Round> r) { OnRound(std::move(r)); },
                      [this](const std::string& reason) { OnRoundEnded(reason); }});
    if (!s.ok()) {
      log::Error("{}", s.message());
      Finish(s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitLaunchError);
      return exit_code_;
    }
    io_.run();
    return exit_code_;
  }

  ~Impl() {
    timers_.reset();  // removes the FIFO
    if (!watchdog_dir_.empty()) ::rmdir(watchdog_dir_.c_str());
  }

 private:
  // kWaiting: no workers, waiting for the rendezvous to give a round (at the
  // start, after a restart, or in the exit barrier).
  enum class State { kWaiting, kRunning, kStopping, kDone };

  // ---- rounds ----------------------------------------------------------------

  void OnRound(Result<rendezvous::Round> r) {
    if (state_ != State::kWaiting) return;
    if (!r.ok()) {
      if (!failures_.empty()) {
        telemetry_.GroupFailed(r.status().message());
        ReportFinalFailure();
      } else {
        telemetry_.RendezvousFailed(r.status());
        log::Error("{}", r.status().message());
      }
      Finish(kExitWorkersFailed);
      return;
    }
    const bool restart = round_.has_value();
    // A failed round that spent nothing was judged a membership change (a
    // node of it was lost; its peers' workers failed on it).
    if (restart && r->failures == round_->failures &&
        (restart_cause_ == "failure" || restart_cause_ == "peer_failure")) {
      restart_cause_ = "membership";
    }
    if (restart && !failures_.empty()) {
      const auto& root = failures_[RootCause(failures_)];
      if (r->failures > round_->failures) {
        log::Warning(
            "worker group failed (local_rank {} exited with {}); restarting, attempt {} of {}",
            root.local_rank, root.exitcode, r->failures, config_.max_restarts);
      } else {
        // The rendezvous found a node of the round lost: our workers failed
        // on their dead peers.
        log::Warning(
            "worker group failed (local_rank {} exited with {}) as a node of the round was "
            "lost; restarting without spending a restart ({} of {} spent)",
            root.local_rank, root.exitcode, r->failures, config_.max_restarts);
      }
    }
    round_ = std::move(*r);
    telemetry_.RendezvousCompleted(*round_);
    if (restart) telemetry_.Restarting(restart_cause_, restart_reason_);
    // A one-node job has nothing to tell: torchrun prints nothing for it.
    if (config_.max_nodes > 1 || (config_.rdzv_backend != "static" && !config_.standalone)) {
      log::Info("round {}: node {} of {} ({}), ranks {}..{} of world size {}; store at {}:{}",
                round_->number, round_->group_rank, round_->participants.size(),
                round_->participants[static_cast<size_t>(round_->group_rank)].addr,
                round_->rank_offset(), round_->rank_offset() + config_.nproc_per_node - 1,
                round_->world_size(), round_->store_addr, round_->store_port);
    }
    Status s = StartAttempt();
    if (!s.ok()) {
      log::Error("{}", s.message());
      telemetry_.GroupStopping("launch_error", s.message(), SIGKILL);
      StopWorkers(SIGKILL, [this] { Finish(kExitLaunchError); });
    }
  }

  // Another node failed, or one joined or was lost: restart with the rest
  // (a membership change spends none of the restart budget).
  void OnRoundEnded(const std::string& reason) {
    if (state_ != State::kRunning) return;
    log::Warning("restarting the worker group: {}", reason);
    // The coordinator's reasons start with what ended the round.
    restart_cause_ = reason.starts_with("membership:") ? "membership"
                     : reason.starts_with("failure:")  ? "peer_failure"
                                                       : "round_ended";
    restart_reason_ = reason;
    telemetry_.GroupStopping("round_ended", reason, SIGTERM);
    StopWorkers(SIGTERM, [this] {
      CloseAttempt();
      if (pending_signal_ != 0) return Finish(128 + pending_signal_);
      failures_.clear();
      state_ = State::kWaiting;
      AskForRound();
    });
  }

  // Puts this node in the next round; OnRound hears back.
  void AskForRound() {
    telemetry_.RendezvousStarted();
    rdzv_->Ready();
  }

  // ---- set-up, once per run ------------------------------------------------

  Status Setup() {
    // Before anything else: the sentinel must hold none of the pipes below.
    auto sentinel = proc::Sentinel::Start();
    if (!sentinel.ok()) return sentinel.status();
    sentinel_.emplace(std::move(*sentinel));
    // Orphaned grandchildren are reparented to us, not to init, so that we
    // can reap and kill them.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::signal(SIGPIPE, SIG_IGN);

    hostname_ = FqdnHostname();
    const char* own_error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (own_error_file) own_error_file_ = own_error_file;

    TRUN_RETURN_IF_ERROR(telemetry_.Start(io_,
                                          {.console_events = config_.event_log_handler == "console",
                                           .event_file = config_.event_log_file,
                                           .health_port = config_.health_check_port,
                                           .health_addr = config_.health_check_addr,
                                           .run_id = config_.rdzv_id,
                                           .role = config_.role,
                                           .hostname = hostname_,
                                           .max_restarts = config_.max_restarts},
                                          [this] { return Health(); }));
    if (config_.file_timer) TRUN_RETURN_IF_ERROR(StartWatchdog());

    // The rendezvous hosts the workers' store (torch's
    // TORCHELASTIC_USE_AGENT_STORE) on one port for the whole job: a dead
    // rank 0 takes nothing down and restarts never meet EADDRINUSE.
    auto rdzv = rendezvous::Make(io_, config_);
    if (!rdzv.ok()) return rdzv.status();
    rdzv_ = std::move(*rdzv);

    if (config_.log_dir != "/dev/null") {
      std::string base;
      if (config_.log_dir) {
        base = *config_.log_dir;
        std::error_code ec;
        fs::create_directories(base, ec);
        if (ec) {
          return Status::InvalidArgument(
              fmt::format("--log-dir {}: cannot create it: {}; choose a writable directory", base,
                          ec.message()));
        }
      } else {
        auto made = MakeUniqueDir(TempDir(), "torchelastic_");
        if (!made.ok()) return made.status();
        base = *made;
      }
      auto run_dir = MakeUniqueDir(base, config_.rdzv_id + "_");
      if (!run_dir.ok()) {
        return Status::InvalidArgument(fmt::format("--log-dir {}: {}; choose a writable directory",
                                                   base, run_dir.status().message()));
      }
      run_log_dir_ = *run_dir;
    }

    devnull_ = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    // A worker in its own process group that reads a terminal would be
    // stopped by SIGTTIN; it gets /dev/null instead.
    stdin_fd_ = ::isatty(STDIN_FILENO) ? devnull_ : -1;

    if (config_.set_omp_num_threads) {
      // torchrun's warning, word for word.
      log::Warning(
          "\n*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
          "avoid your system being overloaded, please further tune the variable for optimal "
          "performance in your application as needed. \n"
          "*****************************************");
    }
    BuildBaseEnv();
    return Status::OK();
  }

  // The agent's environment minus what each worker gets of its own.
  void BuildBaseEnv() {
    static const std::set<std::string> kOwn = {"LOCAL_RANK",
                                               "RANK",
                                               "GROUP_RANK",
                                               "ROLE_RANK",
                                               "ROLE_NAME",
                                               "LOCAL_WORLD_SIZE",
                                               "WORLD_SIZE",
                                               "GROUP_WORLD_SIZE",
                                               "ROLE_WORLD_SIZE",
                                               "MASTER_ADDR",
                                               "MASTER_PORT",
                                               "TORCHELASTIC_RESTART_COUNT",
                                               "TORCHELASTIC_MAX_RESTARTS",
                                               "TORCHELASTIC_RUN_ID",
                                               "TORCHELASTIC_USE_AGENT_STORE",
                                               "NCCL_ASYNC_ERROR_HANDLING",
                                               "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                               "TORCHELASTIC_ERROR_FILE",
                                               "TORCHELASTIC_SIGNALS_TO_HANDLE"};
    std::string nccl_async = "1", torch_nccl_async = "1";
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      std::string key(kv.substr(0, eq));
      if (key == "NCCL_ASYNC_ERROR_HANDLING") nccl_async = kv.substr(eq + 1);
      if (key == "TORCH_NCCL_ASYNC_ERROR_HANDLING") torch_nccl_async = kv.substr(eq + 1);
      if (!kOwn.count(key) && !(timers_ && key == "TORCHELASTIC_TIMER_FILE") &&
          !(config_.virtual_local_rank && key == "CUDA_VISIBLE_DEVICES")) {
        base_env_.emplace_back(kv);
      }
    }
    if (config_.set_omp_num_threads) base_env_.push_back("OMP_NUM_THREADS=1");
    std::string signals;
    for (int sig : config_.signals_to_handle) {
      signals += (signals.empty() ? "" : ",") + proc::SignalName(sig);
    }
    shared_env_ = {
        "ROLE_NAME=" + config_.role,
        "LOCAL_WORLD_SIZE=" + std::to_string(config_.nproc_per_node),
        "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(config_.max_restarts),
        "TORCHELASTIC_RUN_ID=" + config_.rdzv_id,
        // Every rank, rank 0 too, is a client of the agent's store, under
        // the prefix /worker/attempt_<restart count>.
        "TORCHELASTIC_USE_AGENT_STORE=True",
        "NCCL_ASYNC_ERROR_HANDLING=" + nccl_async,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=" + torch_nccl_async,
        "TORCHELASTIC_SIGNALS_TO_HANDLE=" + signals,
    };
    if (timers_) shared_env_.push_back("TORCHELASTIC_TIMER_FILE=" + timers_->path());
  }

  // torch's FileTimerServer, without its polling: workers' timers arrive
  // through a FIFO, and an expired one is acted on at its deadline.
  Status StartWatchdog() {
    std::string path = config_.timer_file;
    if (path.empty()) {
      // A directory only we can enter: nobody else can write our FIFO.
      auto dir = MakeUniqueDir(TempDir(), "trun_watchdog_");
      if (!dir.ok()) return dir.status();
      watchdog_dir_ = *dir;
      path = watchdog_dir_ + "/timer";
    }
    auto server = FileTimerServer::Start(io_, path,
                                         {[this](pid_t pid) { return WorkerOf(pid) != nullptr; },
                                          [this](const TimerRequest& t, double sent_at, int error) {
                                            OnWatchdogExpired(t, sent_at, error);
                                          }});
    if (!server.ok()) return server.status();
    timers_ = std::move(*server);
    telemetry_.set_timer_server(timers_.get());
    return Status::OK();
  }

  // ---- one attempt: start every worker ------------------------------------

  Status StartAttempt() {
    state_ = State::kRunning;
    ++attempts_;
    failures_.clear();
    workers_.clear();
    const rendezvous::Round& round = *round_;
    const int world = round.world_size();
    const int nodes = static_cast<int>(round.participants.size());
    std::vector<std::string> round_env = {
        "WORLD_SIZE=" + std::to_string(world),
        "GROUP_WORLD_SIZE=" + std::to_string(nodes),
        "ROLE_WORLD_SIZE=" + std::to_string(world),
        "MASTER_ADDR=" + round.store_addr,
        "MASTER_PORT=" + std::to_string(round.store_port),
        "GROUP_RANK=" + std::to_string(round.group_rank),
        "TORCHELASTIC_RESTART_COUNT=" + std::to_string(round.number),
    };
    std::string attempt_dir;
    if (!run_log_dir_.empty()) {
      attempt_dir = fmt::format("{}/attempt_{}", run_log_dir_, round.number);
      std::error_code ec;
      fs::remove_all(attempt_dir, ec);
      fs::create_directories(attempt_dir, ec);
      if (ec)
        return Status::IOError(fmt::format("cannot create {}: {}", attempt_dir, ec.message()));
    }
    // torch opens filtered_std{out,err}.log in the attempt's directory
    // whenever filters are given, also when no stream is teed.
    if (!attempt_dir.empty()) {
      for (auto [filters, name, fd] :
           {std::tuple{&config_.duplicate_stdout_filters, "filtered_stdout.log", &filtered_out_},
            std::tuple{&config_.duplicate_stderr_filters, "filtered_stderr.log", &filtered_err_}}) {
        if (filters->empty()) continue;
        std::string path = attempt_dir + "/" + name;
        if (*fd >= 0) ::close(*fd);
        *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (*fd < 0) return Status::FromErrno("cannot create " + path, errno);
      }
    }
    const int n = config_.nproc_per_node;
    workers_.resize(static_cast<size_t>(n));
    for (int lr = 0; lr < n; ++lr) {
      Worker& w = workers_[static_cast<size_t>(lr)];
      w.local_rank = lr;
      w.global_rank = round.rank_offset() + lr;
      std::string rank_dir;
      if (!attempt_dir.empty()) {
        rank_dir = fmt::format("{}/{}", attempt_dir, lr);
        if (::mkdir(rank_dir.c_str(), 0755) != 0 && errno != EEXIST) {
          return Status::FromErrno("cannot create " + rank_dir, errno);
        }
        w.error_file = rank_dir + "/error.json";
      }
      std::string prefix = !config_.log_line_prefix_template.empty()
                               ? SubstitutePrefix(config_.log_line_prefix_template, config_.role,
                                                  lr, w.global_rank, short_hostname_)
                           : nodes > 1
                               ? fmt::format("[{}:{}{}]:", round.group_rank, config_.role, lr)
                               : fmt::format("[{}{}]:", config_.role, lr);
      int child_out = -1, child_err = -1;
      TRUN_RETURN_IF_ERROR(SetUpStream(w, *w.out, rank_dir, "stdout.log", launch::HasOut,
                                       STDOUT_FILENO, prefix, child_out));
      TRUN_RETURN_IF_ERROR(SetUpStream(w, *w.err, rank_dir, "stderr.log", launch::HasErr,
                                       STDERR_FILENO, prefix, child_err));
      if (w.err->pump) w.err->pump->KeepTail(kStderrTail);

      proc::SpawnOptions opts;
      opts.argv = config_.worker_argv;
      opts.env = base_env_;
      opts.env.insert(opts.env.end(), shared_env_.begin(), shared_env_.end());
      opts.env.insert(opts.env.end(), round_env.begin(), round_env.end());
      if (config_.virtual_local_rank) {
        // torch's virtual local rank: each worker's only GPU is device 0.
        opts.env.push_back("LOCAL_RANK=0");
        opts.env.push_back("CUDA_VISIBLE_DEVICES=" +
                           config_.virtual_devices[static_cast<size_t>(lr)]);
      } else {
        opts.env.push_back("LOCAL_RANK=" + std::to_string(lr));
      }
      opts.env.push_back("RANK=" + std::to_string(w.global_rank));
      opts.env.push_back("ROLE_RANK=" + std::to_string(w.global_rank));
      opts.env.push_back("TORCHELASTIC_ERROR_FILE=" + w.error_file);
      opts.stdin_fd = stdin_fd_;
      opts.stdout_fd = child_out;
      opts.stderr_fd = child_err;
      auto pid = proc::Spawn(opts);
      // The child holds its ends now; ours would keep the pipes from EOF.
      for (int fd : {child_out, child_err}) {
        if (fd >= 0 && fd != devnull_ && !IsOwnedFile(w, fd)) ::close(fd);
      }
      if (!pid.ok()) return pid.status();
      w.pid = *pid;
      w.running = true;
      sentinel_->Register(w.pid);
      telemetry_.WorkerStarted(lr, w.global_rank, w.pid);
      Watch(w.out);
      Watch(w.err);
    }
    log::Debug("attempt {} started {} workers", round.number, n);
    return Status::OK();
  }

  static bool IsOwnedFile(const Worker& w, int fd) {
    return std::find(w.owned_fds.begin(), w.owned_fds.end(), fd) != w.owned_fds.end();
  }

  // Decides where one worker stream goes and sets up what that takes;
  // `child_fd` is what the worker gets as that stream (-1: ours).
  Status SetUpStream(Worker& w, Stream& s, const std::string& rank_dir, const char* file_name,
                     bool (*has)(Std), int console_fd, const std::string& prefix, int& child_fd) {
    const int lr = w.local_rank;
    const bool tee = has(config_.tee.ForRank(lr));
    const bool redirect = tee || has(config_.redirects.ForRank(lr));
    const bool shown = !config_.local_ranks_filter || config_.local_ranks_filter->count(lr);
    child_fd = -1;
    s.on_bytes = [this, is_stderr = console_fd == STDERR_FILENO](size_t n) {
      telemetry_.LogBytes(is_stderr, n);
    };
    if (!redirect && shown) return Status::OK();  // straight to our console, as torchrun

    int file_fd = -1;
    if (redirect && !rank_dir.empty()) {
      std::string path = rank_dir + "/" + file_name;
      file_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (file_fd < 0) return Status::FromErrno("cannot create " + path, errno);
      w.owned_fds.push_back(file_fd);
      if (console_fd == STDERR_FILENO) w.stderr_log = path;
    }
    if (!(tee && shown)) {
      // No console copy: the worker writes its file (or nothing) itself.
      child_fd = file_fd >= 0 ? file_fd : devnull_;
      return Status::OK();
    }
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
    // A bigger pipe means fewer wake-ups for chatty workers; best effort.
    ::fcntl(p[0], F_SETPIPE_SZ, 1 << 20);
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    s.fd = p[0];
    s.pump = std::make_unique<proc::LinePump>(prefix, console_fd, file_fd);
    // torch duplicates the streams it tails: teed and shown.
    const bool is_stderr = console_fd == STDERR_FILENO;
    int dup_fd = is_stderr ? filtered_err_ : filtered_out_;
    if (dup_fd >= 0) {
      s.pump->DuplicateMatching(
          dup_fd, is_stderr ? config_.duplicate_stderr_filters : config_.duplicate_stdout_filters);
    }
    child_fd = p[1];
    return Status::OK();
  }

  // ---- worker output --------------------------------------------------------

  void Watch(const std::shared_ptr<Stream>& s) { proc::WatchPipe(io_, s); }

  // ---- events ---------------------------------------------------------------

  void WatchSignals() {
    signals_.add(SIGCHLD);
    for (int sig : config_.signals_to_handle) signals_.add(sig);
    signals_.async_wait([this](std::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        ReapChildren();
      } else {
        OnSignal(sig);
      }
      if (!stopped_) WatchSignals();
    });
  }

  void ReapChildren() {
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto& w : workers_) {
        if (w.pid == pid && w.running) OnWorkerExit(w, status);
      }
    }
    if (state_ == State::kRunning) {
      Evaluate();
    } else if (state_ == State::kStopping && LiveWorkers() == 0) {
      grace_timer_.cancel();
      auto then = std::move(after_stop_);
      after_stop_ = nullptr;
      if (then) then();
    }
  }

  void OnWorkerExit(Worker& w, int status) {
    w.running = false;
    w.exitcode = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
    w.exited_at = NowSeconds();
    w.stopped = state_ != State::kRunning;
    // Everything the worker wrote is in its pipes by now: take it before
    // anything is reported, so a crash never loses its last lines.
    proc::DrainPipe(*w.out);
    proc::DrainPipe(*w.err);
    if (timers_) timers_->ClearPid(w.pid);
    telemetry_.WorkerExited(w.local_rank, w.global_rank, w.pid, w.exitcode, w.stopped,
                            !w.watchdog.empty() ? FailureCause::kWatchdog
                            : w.exitcode < 0    ? FailureCause::kSignal
                                                : FailureCause::kExitCode);
    if (state_ == State::kRunning && w.exitcode != 0) {
      // Said at once, in torch's words, before the siblings are stopped.
      log::Error("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", w.exitcode,
                 w.local_rank, w.pid, config_.worker_argv[0]);
      failures_.push_back(DescribeFailure(w.local_rank, w.global_rank, w.pid, w.exitcode,
                                          w.error_file, w.exited_at, StderrTail(w)));
      if (!w.watchdog.empty()) failures_.back().message += "\n  watchdog: " + w.watchdog;
    } else if (state_ == State::kStopping && !failures_.empty() && w.exitcode != 0) {
      // A sibling stopped because of that failure: torchrun 2.x lists it.
      failures_.push_back(DescribeFailure(w.local_rank, w.global_rank, w.pid, w.exitcode,
                                          w.error_file, w.exited_at, StderrTail(w)));
      failures_.back().stopped = true;
    }
  }

  // The last of a worker's stderr, where trun sees it: through its pipe when
  // teed, in its file when redirected; "" when it goes straight to the
  // console.
  static std::string StderrTail(const Worker& w) {
    if (w.err->pump) return w.err->pump->Tail();
    if (w.stderr_log.empty()) return "";
    std::ifstream in(w.stderr_log, std::ios::binary);
    in.seekg(0, std::ios::end);
    std::streamoff size = in.tellg();
    if (size <= 0) return "";
    std::streamoff from =
        std::max<std::streamoff>(0, size - static_cast<std::streamoff>(kStderrTail));
    in.seekg(from);
    std::string tail(static_cast<size_t>(size - from), '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    tail.resize(static_cast<size_t>(in.gcount()));
    return tail;
  }

  // The running worker that `pid` is, or whose process group it is in.
  Worker* WorkerOf(pid_t pid) {
    const pid_t group = ::getpgid(pid);
    for (auto& w : workers_) {
      if (w.running && (w.pid == pid || w.pid == group)) return &w;
    }
    return nullptr;
  }

  void OnWatchdogExpired(const TimerRequest& t, double sent_at, int error) {
    Worker* w = WorkerOf(t.pid);
    if (t.signal == 0) {
      log::Warning("watchdog: timer '{}' of PID {} expired; it names no signal, so nothing is sent",
                   t.scope_id, t.pid);
    } else if (error != 0) {
      log::Warning("watchdog: timer '{}' of PID {} expired; cannot send {}: {}", t.scope_id, t.pid,
                   proc::SignalName(t.signal), std::strerror(error));
    } else {
      log::Warning("watchdog: timer '{}' of PID {} expired; sent {}", t.scope_id, t.pid,
                   proc::SignalName(t.signal));
      if (w) {
        w->watchdog = fmt::format("timer '{}' of PID {} expired; trun sent {}", t.scope_id, t.pid,
                                  proc::SignalName(t.signal));
      }
    }
    telemetry_.WatchdogExpired(t, w ? w->local_rank : -1, sent_at, error);
  }

  // What /health shows, in torch's WorkerState names.
  GroupHealth Health() const {
    GroupHealth h;
    switch (state_) {
      case State::kWaiting:
        h.state = succeeded_ ? "SUCCEEDED" : "INIT";
        break;
      case State::kRunning:
        h.state = failures_.empty() ? "HEALTHY" : "UNHEALTHY";
        break;
      case State::kStopping:
        h.state = pending_signal_ != 0 ? "STOPPED" : "UNHEALTHY";
        break;
      case State::kDone:
        h.state = exit_code_ == kExitSuccess         ? "SUCCEEDED"
                  : exit_code_ == kExitWorkersFailed ? "FAILED"
                                                     : "STOPPED";
        break;
    }
    if (round_) {
      h.round = round_->number;
      h.node_rank = round_->group_rank;
      h.restarts = round_->failures;
    }
    h.attempts = attempts_;
    for (const auto& w : workers_) {
      WorkerHealth wh;
      wh.local_rank = w.local_rank;
      wh.rank = w.global_rank;
      wh.pid = w.pid;
      wh.state = w.running         ? "running"
                 : w.stopped       ? "stopped"
                 : w.exitcode == 0 ? "succeeded"
                                   : "failed";
      if (!w.running) wh.exitcode = w.exitcode;
      h.workers.push_back(wh);
    }
    return h;
  }

  int LiveWorkers() const {
    int live = 0;
    for (const auto& w : workers_) live += w.running ? 1 : 0;
    return live;
  }

  void Evaluate() {
    if (!failures_.empty()) {
      const auto& root = failures_[RootCause(failures_)];
      restart_cause_ = "failure";
      restart_reason_ = fmt::format("rank {} (local_rank {}, pid {}) exited with {}",
                                    root.global_rank, root.local_rank, root.pid, root.exitcode);
      telemetry_.GroupStopping("failure", restart_reason_, SIGTERM);
      rdzv_->Failed(restart_reason_);
      StopWorkers(SIGTERM, [this] { AfterFailure(); });
      return;
    }
    if (LiveWorkers() == 0) {
      CloseAttempt();
      telemetry_.GroupSucceeded();
      // The exit barrier: done once every node of the round is.
      state_ = State::kWaiting;
      succeeded_ = true;
      rdzv_->Succeeded([this] { Finish(kExitSuccess); });
    }
  }

  void AfterFailure() {
    CloseAttempt();
    if (pending_signal_ != 0) {
      WriteRootCause();
      Finish(128 + pending_signal_);
      return;
    }
    // The rendezvous counts the failed round against the job's budget and
    // answers with the next round or with the news that it is spent.
    state_ = State::kWaiting;
    AskForRound();
  }

  void ReportFinalFailure() {
    const int64_t restarts = round_ ? round_->failures : 0;
    std::string table = FormatFailureTable(config_.entrypoint_name, failures_, hostname_);
    log::Error("worker group failed{}:{}",
               config_.max_restarts > 0
                   ? fmt::format(" after {} restart{}", restarts, restarts == 1 ? "" : "s")
                   : "",
               table);
    WriteRootCause();
  }

  // The agent's own error file gets the attempt's root cause, also when a
  // signal (a scheduler stopping the job) ends trun after a worker failed:
  // whoever stopped it still learns why the job failed.
  void WriteRootCause() {
    if (own_error_file_.empty() || failures_.empty()) return;
    Status s = WriteAgentErrorFile(own_error_file_, failures_[RootCause(failures_)]);
    if (!s.ok()) log::Warning("{}", s.message());
  }

  void OnSignal(int sig) {
    if (state_ == State::kDone) return Stop();
    if (pending_signal_ != 0) {
      // A second signal while stopping: no more grace.
      log::Warning("received {} again; killing workers now", proc::SignalName(sig));
      KillGroups(SIGKILL);
      return;
    }
    pending_signal_ = sig;
    log::Warning("received {}; stopping workers", proc::SignalName(sig));
    if (state_ == State::kStopping) {
      // Already stopping after a failure: AfterFailure sees pending_signal_.
      return;
    }
    if (state_ == State::kWaiting) {
      WriteRootCause();
      Finish(128 + sig);
      return;
    }
    telemetry_.GroupStopping("signal", "received " + proc::SignalName(sig), sig);
    StopWorkers(sig, [this, sig] {
      CloseAttempt();
      Finish(128 + sig);
    });
  }

  // Signals every live worker's process group, then SIGKILLs what is left
  // after TORCH_ELASTIC_SHUTDOWN_TIMEOUT; `then` runs once all have exited.
  void StopWorkers(int sig, std::function<void()> then) {
    state_ = State::kStopping;
    after_stop_ = std::move(then);
    if (LiveWorkers() == 0) {
      auto next = std::move(after_stop_);
      after_stop_ = nullptr;
      next();
      return;
    }
    KillGroups(sig);
    if (sig == SIGKILL) return;
    grace_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.shutdown_timeout_s)));
    grace_timer_.async_wait([this](std::error_code ec) {
      if (ec || state_ != State::kStopping) return;
      log::Warning("workers still running {} s after the stop signal; sending SIGKILL",
                   config_.shutdown_timeout_s);
      KillGroups(SIGKILL);
    });
  }

  void KillGroups(int sig) {
    for (const auto& w : workers_) {
      if (w.running) ::kill(-w.pid, sig);
    }
  }

  // Ends an attempt: whatever is left of each worker's process group
  // (grandchildren) is killed, output is drained, files are closed.
  void CloseAttempt() {
    if (timers_) timers_->Clear();
    for (auto& w : workers_) {
      if (w.pid > 0) {
        ::kill(-w.pid, SIGKILL);
        sentinel_->Unregister(w.pid);
      }
      proc::DrainPipe(*w.out);
      proc::DrainPipe(*w.err);
      proc::ClosePipe(*w.out);
      proc::ClosePipe(*w.err);
      for (int fd : w.owned_fds) ::close(fd);
      w.owned_fds.clear();
    }
    for (int* fd : {&filtered_out_, &filtered_err_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  void Finish(int code) {
    state_ = State::kDone;
    exit_code_ = code;
    telemetry_.Shutdown(code);
    KillOrphans();
    grace_timer_.cancel();
    // A host lingers until the other nodes have read how the job ended; a
    // signal meanwhile (OnSignal) cuts that short.
    if (!rdzv_) return Stop();
    rdzv_->Leave([this] { Stop(); });
  }

  void Stop() {
    stopped_ = true;
    if (rdzv_) rdzv_->Shutdown();
    signals_.cancel();
    io_.stop();
  }

  // Descendants that left their worker's group were reparented to us (we are
  // a subreaper); none may outlive the job.
  void KillOrphans() {
    std::vector<pid_t> children;
    if (DIR* d = ::opendir("/proc/self/task")) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::ifstream in(fmt::format("/proc/self/task/{}/children", e->d_name));
        pid_t pid;
        while (in >> pid) children.push_back(pid);
      }
      ::closedir(d);
    }
    for (pid_t pid : children) {
      if (pid != sentinel_->pid()) ::kill(pid, SIGKILL);
    }
    for (pid_t pid : children) {
      if (pid != sentinel_->pid()) ::waitpid(pid, nullptr, 0);
    }
  }

  LaunchConfig config_;
  asio::io_context io_{1};
  asio::signal_set signals_;
  asio::steady_timer grace_timer_;

  std::optional<proc::Sentinel> sentinel_;
  Telemetry telemetry_;
  std::unique_ptr<FileTimerServer> timers_;  // the watchdog, when enabled
  std::string watchdog_dir_;                 // its private directory, when we made one
  std::unique_ptr<rendezvous::Rendezvous> rdzv_;
  bool stopped_ = false;  // Stop() ran: the loop is ending
  std::optional<rendezvous::Round> round_;
  std::string hostname_;
  std::string short_hostname_ = ShortHostname();
  std::string own_error_file_;
  std::string run_log_dir_;
  int devnull_ = -1;
  int stdin_fd_ = -1;
  // This attempt's filtered_std{out,err}.log (--duplicate-*-filters), or -1.
  int filtered_out_ = -1;
  int filtered_err_ = -1;
  std::vector<std::string> base_env_;
  std::vector<std::string> shared_env_;

  State state_ = State::kWaiting;
  bool succeeded_ = false;  // every worker exited 0; in the exit barrier
  int attempts_ = 0;        // groups started by this agent
  // Why the group is being restarted, for the next round's event.
  std::string restart_cause_;
  std::string restart_reason_;
  int pending_signal_ = 0;
  int exit_code_ = kExitLaunchError;
  std::vector<Worker> workers_;
  std::vector<WorkerFailure> failures_;
  std::function<void()> after_stop_;
};

LocalAgent::LocalAgent(launch::LaunchConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {}
LocalAgent::~LocalAgent() = default;
int LocalAgent::Run() { return impl_->Run(); }

}  // namespace trun::agent
