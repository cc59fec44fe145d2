#include "agent/agent.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "agent/file_timer.h"
#include "agent/hang.h"
#include "agent/stacks.h"
#include "agent/telemetry.h"
#include "agent/worker_env.h"
#include "agent/worker_output.h"
#include "agent/worker_table.h"
#include "common/exit_code.h"
#include "common/log.h"
#include "common/net.h"
#include "failure/failure.h"
#include "launch/rdzv_conf.h"
#include "proc/group_supervisor.h"
#include "proc/signals.h"
#include "proc/spawn.h"
#include "rendezvous/rendezvous.h"
#include "store/relay.h"

namespace trun::agent {
namespace {

using failure::WorkerFailure;
using launch::LaunchConfig;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exitcode = 0;      // exit code, or -signal; valid once !running
  bool stopped = false;  // exited after the agent asked it to stop
  std::string watchdog;  // the expired timer the watchdog acted on, if it did
  std::string hang;      // where --hang-action fail found it hung, if it did
  WorkerOutput output;
  // What trun's pumps read from it, for --hang-timeout; shared with the
  // pumps' callbacks, which may outlive the attempt.
  std::shared_ptr<uint64_t> output_bytes = std::make_shared<uint64_t>(0);
};

}  // namespace

class LocalAgent::Impl {
 public:
  Impl(LaunchConfig config, ProcessTableFactory table, LoopFactory loop)
      : config_(std::move(config)),
        make_table_(std::move(table)),
        signals_(io_),
        loop_(loop ? loop(io_) : std::make_unique<proc::AsioLoop>(io_)) {
    if (!make_table_) {
      make_table_ = [this](asio::io_context& io) { return MakeWorkerTable(io, config_); };
    }
  }

  int Run() {
    Status s = Setup();
    if (!s.ok()) {
      exit_code_ = ReportError(s);
      telemetry_.Shutdown(exit_code_);
      return exit_code_;
    }
    WatchSignals();
    telemetry_.AgentStarted(timers_ ? timers_->path() : "");
    telemetry_.RendezvousStarted();
    s = rdzv_->Start({[this](rendezvous::RoundOutcome r) { OnRound(std::move(r)); },
                      [this](const rendezvous::RoundEnd& end) { OnRoundEnded(end); }});
    if (!s.ok()) {
      Finish(ReportError(s));
      return exit_code_;
    }
    io_.run();
    return exit_code_;
  }

  ~Impl() {
    if (relay_thread_.joinable()) relay_thread_.join();
    timers_.reset();  // removes the FIFO
    if (!watchdog_dir_.empty()) ::rmdir(watchdog_dir_.c_str());
  }

 private:
  // kWaiting: no workers, waiting for the rendezvous to give a round (at the
  // start, after a restart, or in the exit barrier). kStarting: a round is
  // given, and the process table is not yet ready to start its workers
  // without blocking the loop (a warm process still importing).
  enum class State { kWaiting, kStarting, kRunning, kStopping, kDone };

  // ---- rounds ----------------------------------------------------------------

  void OnRound(rendezvous::RoundOutcome outcome) {
    if (state_ != State::kWaiting) {
      // No round will come (the rendezvous's host lost, and nobody could
      // take over) while the workers start, run or stop: the participant's
      // threads have ended, so the agent would wait for a round forever.
      // It is heard once the workers are stopped, when the agent would ask
      // for a round (AskForRound).
      const auto* none = std::get_if<rendezvous::NoRound>(&outcome);
      if (!none || no_round_ || state_ == State::kDone) return;
      no_round_ = *none;
      if (state_ == State::kRunning) {
        log::Warning("stopping the worker group: {}", none->why.message());
        telemetry_.GroupStopping("round_ended", none->why.message(), SIGTERM);
        StopWorkers(SIGTERM, [this] { AfterStop(); });
      }
      return;
    }
    if (const auto* none = std::get_if<rendezvous::NoRound>(&outcome)) return OnNoRound(*none);
    rendezvous::Round* r = &std::get<rendezvous::Round>(outcome);
    const bool restart = round_.has_value();
    // A failed round that spent nothing was judged a membership change (a
    // node of it was lost; its peers' workers failed on it).
    if (restart && r->failures == round_->failures &&
        (restart_cause_ == "failure" || restart_cause_ == "peer_failure")) {
      restart_cause_ = "membership";
    }
    if (restart && !failures_.empty()) {
      const auto& root = failures_.root();
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
                round_->number, round_->group_rank, round_->nodes, round_->addr,
                round_->rank_offset, round_->rank_offset + config_.nproc_per_node - 1,
                round_->world_size, round_->store_addr, round_->store_port);
    }
    state_ = State::kStarting;
    table_->WhenReady([this] { OnTableReady(); });
  }

  // No round will come: the job is over for this node. A node whose workers
  // failed in the last attempt ends with their failure (torchrun's table,
  // the root cause written), however the job ran out of rounds: the budget
  // spent, or the others never back; where that was not the budget, it
  // says first why no round came (the rendezvous's host lost and nobody to
  // take over, etcd not answering), which the table cannot tell. Any other
  // node says what the rendezvous said, and its telemetry tells a timeout
  // by the kind.
  void OnNoRound(const rendezvous::NoRound& none) {
    if (!failures_.empty()) {
      if (none.kind != rendezvous::NoRound::Kind::kBudgetSpent) {
        log::Error("{}", none.why.message());
      }
      telemetry_.GroupFailed(none.why.message());
      ReportFinalFailure();
    } else {
      telemetry_.RendezvousFailed(none);
      (void)ReportError(none.why);
    }
    Finish(kExitFailed);
  }

  void OnTableReady() {
    // The round may have ended meanwhile (OnRoundEnded), or the job (a
    // signal); a later round's own wait may have started its workers.
    if (state_ != State::kStarting) return;
    if (no_round_) return NoWorkersToStart();
    relay_.reset();
    if (WantRelay()) return LinkRelay();
    StartOrStop(StartAttempt());
  }

  // A round was given, and then the news that no round will come, before
  // its workers started: none start.
  void NoWorkersToStart() {
    state_ = State::kWaiting;
    AskForRound();
  }

  void StartOrStop(Status s) {
    if (s.ok()) return;
    (void)ReportError(s);
    telemetry_.GroupStopping("launch_error", s.message(), SIGKILL);
    StopWorkers(SIGKILL, [this] { Finish(kExitCannot); });
  }

  // --store-relay: the workers reach the job's store through this node's
  // relay, one connection per node, in a job of more than
  // kAutoRelayWorkers workers under auto (below that a store holds every
  // rank's connection with ease, and a relay is one more hop).
  bool WantRelay() const {
    switch (config_.store_relay) {
      case LaunchConfig::StoreRelay::kOn:
        return true;
      case LaunchConfig::StoreRelay::kOff:
        return false;
      case LaunchConfig::StoreRelay::kAuto:
        return config_.nproc_per_node > 1 && round_->world_size > LaunchConfig::kAutoRelayWorkers;
    }
    return false;
  }

  // A relay per attempt, linked to the round's store. The handshake
  // blocks, and the store may be this agent's own, served by this very
  // loop: it runs on a thread of its own, and the attempt starts once the
  // link is up.
  void LinkRelay() {
    if (relay_thread_.joinable()) relay_thread_.join();
    store::RelayOptions o;
    o.store_host = round_->store_addr;
    o.store_port = round_->store_port;
    o.job_token = config_.rdzv.job_token;
    o.connect_timeout = std::chrono::seconds(30);
    relay_thread_ = std::thread([this, o] {
      auto fd = store::Relay::Handshake(o);
      asio::post(io_, [this, o, fd] { OnRelayLinked(o, fd); });
    });
  }

  void OnRelayLinked(store::RelayOptions o, Result<int> fd) {
    // No round to come is the likelier news where the link failed: the
    // host lost served the store.
    if (state_ != State::kStarting || no_round_) {
      if (fd.ok()) ::close(*fd);
      if (state_ == State::kStarting) NoWorkersToStart();
      return;
    }
    if (!fd.ok()) {
      return StartOrStop(Status::Unavailable(
          fmt::format("--store-relay: the workers' relay cannot link to the job's store: {}",
                      fd.status().message())));
    }
    auto relay = store::Relay::Serve(io_, std::move(o), *fd);
    if (!relay.ok()) return StartOrStop(relay.status());
    relay_ = std::move(*relay);
    StartOrStop(StartAttempt());
  }

  // Another node failed, or one joined or was lost: restart with the rest
  // (a membership change spends none of the restart budget).
  void OnRoundEnded(const rendezvous::RoundEnd& end) {
    if (state_ != State::kRunning && state_ != State::kStarting) return;
    log::Warning("restarting the worker group: {}", end.reason);
    restart_cause_ = rendezvous::CauseName(end.cause);
    restart_reason_ = end.reason;
    if (state_ == State::kStarting) {
      // No worker started: on to the next round at once.
      state_ = State::kWaiting;
      return AskForRound();
    }
    telemetry_.GroupStopping("round_ended", end.reason, SIGTERM);
    // failures_ keeps this node's own failures seen during the stop
    // (OnWorkerExit): reported if no round comes (or a signal ends trun),
    // cleared by the next attempt.
    StopWorkers(SIGTERM, [this] { AfterStop(); });
  }

  // Puts this node in the next round; OnRound hears back.
  void AskForRound() {
    if (no_round_) return OnNoRound(*no_round_);
    telemetry_.RendezvousStarted();
    rdzv_->Ready();
  }

  // ---- set-up, once per run ------------------------------------------------

  Status Setup() {
    // Before anything else: the orphan sentinel the process table starts
    // must hold none of the pipes below.
    auto table = make_table_(io_);
    if (!table.ok()) return table.status();
    table_ = std::move(*table);
    workers_sup_.emplace(*table_, *loop_,
                         proc::GroupSupervisor::Hooks{
                             .on_exit = [this](const proc::GroupExit& e) { OnWorkerExit(e); },
                             .after_exits = [this] { AfterExits(); },
                             .on_grace_expired =
                                 [this] {
                                   log::Warning(
                                       "workers still running {} s after the stop signal; "
                                       "sending SIGKILL",
                                       config_.shutdown_timeout_s);
                                 }});
    ::signal(SIGPIPE, SIG_IGN);

    hostname_ = FqdnHostname();
    const char* own_error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (own_error_file) own_error_file_ = own_error_file;
    const char* failure_json = std::getenv("TRUN_FAILURE_JSON");
    if (failure_json) failure_json_ = failure_json;

    TRUN_RETURN_IF_ERROR(telemetry_.Start(
        io_,
        {.console_events = config_.event_log_handler == "console",
         .event_file = config_.event_log_file,
         .health_port = config_.health_check_port,
         .health_addr = config_.health_check_addr,
         .run_id = config_.rdzv_id,
         .role = config_.role,
         .hostname = hostname_,
         .max_restarts = config_.max_restarts,
         // A token of the agent's own guards
         // nothing a user could prove.
         .job_token = config_.rdzv.job_token_own ? std::string() : config_.rdzv.job_token},
        [this] { return Health(); }));
    if (config_.file_timer) TRUN_RETURN_IF_ERROR(StartWatchdog());

    // The rendezvous hosts the workers' store (torch's
    // TORCHELASTIC_USE_AGENT_STORE) on one port for the whole job: a dead
    // rank 0 takes nothing down and restarts never meet EADDRINUSE.
    rendezvous::Options rdzv_options = launch::RdzvOptions(config_);
    // The other nodes reach this health server through the rounds, for a
    // whole job's stacks (GET /stacks?scope=job).
    rdzv_options.health_port = telemetry_.health_port();
    auto rdzv = rendezvous::Make(io_, std::move(rdzv_options));
    if (!rdzv.ok()) return rdzv.status();
    rdzv_ = std::move(*rdzv);

    auto run_log_dir = MakeRunLogDir(config_);
    if (!run_log_dir.ok()) return run_log_dir.status();
    run_log_dir_ = std::move(*run_log_dir);

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
    agent_env_ = proc::EnvironWith();
    return Status::OK();
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
    failures_.Clear();
    workers_.clear();
    const rendezvous::Round& round = *round_;
    const int nodes = round.nodes;
    auto files = AttemptFiles::Open(run_log_dir_, static_cast<int>(round.number), config_);
    if (!files.ok()) return files.status();
    attempt_files_.emplace(std::move(*files));
    const int n = config_.nproc_per_node;
    workers_.resize(static_cast<size_t>(n));
    for (int lr = 0; lr < n; ++lr) {
      Worker& w = workers_[static_cast<size_t>(lr)];
      w.local_rank = lr;
      w.global_rank = round.rank_offset + lr;
      std::string prefix = !config_.log_line_prefix_template.empty()
                               ? SubstitutePrefix(config_.log_line_prefix_template, config_.role,
                                                  lr, w.global_rank, short_hostname_)
                           : nodes > 1
                               ? fmt::format("[{}:{}{}]:", round.group_rank, config_.role, lr)
                               : fmt::format("[{}{}]:", config_.role, lr);
      TRUN_RETURN_IF_ERROR(
          w.output.SetUp(config_, *attempt_files_, lr, prefix, devnull_,
                         [this, counted = w.output_bytes](bool is_stderr, size_t bytes) {
                           *counted += bytes;
                           telemetry_.LogBytes(is_stderr, bytes);
                         }));
      proc::SpawnOptions opts;
      opts.argv = config_.worker_argv;
      opts.env = WorkerEnv(agent_env_, config_, timers_ ? timers_->path() : "",
                           {.local_rank = lr,
                            .rank = w.global_rank,
                            .group_rank = round.group_rank,
                            .nodes = nodes,
                            .world_size = round.world_size,
                            .master_addr = relay_ ? "127.0.0.1" : round.store_addr,
                            .master_port = relay_ ? relay_->port() : round.store_port,
                            .restart_count = static_cast<int>(round.number),
                            .error_file = w.output.error_file});
      if (!config_.worker_cpus.empty()) {
        const auto& cpus = config_.worker_cpus.at(static_cast<size_t>(lr));
        opts.cpus.assign(cpus.begin(), cpus.end());
      }
      opts.stdin_fd = stdin_fd_;
      opts.stdout_fd = w.output.child_out;
      opts.stderr_fd = w.output.child_err;
      auto pid = workers_sup_->Start(opts);
      // The child holds its ends now; ours would keep the pipes from EOF.
      w.output.CloseChildEnds(devnull_);
      if (!pid.ok()) return pid.status();
      w.pid = *pid;
      w.running = true;
      telemetry_.WorkerStarted(lr, w.global_rank, w.pid);
      proc::WatchPipe(io_, w.output.out);
      proc::WatchPipe(io_, w.output.err);
    }
    log::Debug("attempt {} started {} workers", round.number, n);
    std::vector<StackTarget> ranks;
    for (const auto& w : workers_) ranks.push_back({w.global_rank, w.local_rank, w.pid, ""});
    rank_table_.Publish(ranks);
    StartHangWatch();
    return Status::OK();
  }

  // ---- --hang-timeout (hang.h) ---------------------------------------------

  static double SteadySeconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void StartHangWatch() {
    hang_summary_.clear();
    hang_groups_.clear();
    second_timeout_.reset();
    hang_failing_ = false;
    quiet_s_.reset();
    asking_ = false;
    next_ask_at_ = 0;
    warned_unknown_ = false;
    if (config_.hang_timeout_s <= 0) return;
    progress_.emplace(config_.hang_timeout_s);
    if (!device_waits_) device_waits_ = std::make_unique<DeviceWaitWatcher>();
    device_waits_->Watch({});
    OnProgressSample();
  }

  // Every worker of the attempt exited 0: the exit barrier, waiting for
  // the other nodes' workers.
  bool Finished() const { return state_ == State::kWaiting && succeeded_; }

  // Whether the hang watch goes on: while the workers run, and on group
  // rank 0 of a job of several nodes also in its exit barrier, until it has
  // a verdict: the judge keeps judging while the others run (hang.h).
  bool Watching() const {
    if (state_ == State::kRunning) return true;
    return Finished() && round_->group_rank == 0 && round_->participants.size() > 1 &&
           hang_groups_.empty();
  }

  // Every kSamplePeriodS while Watching().
  void OnProgressSample() {
    if (!progress_) return;
    if (!Watching()) return device_waits_->Watch({});
    const double now = SteadySeconds();
    if (Finished()) {
      // Nothing of ours left to sample: finished is quiet for good.
      device_waits_->Watch({});
      if (!asking_ && now >= next_ask_at_) JudgeHang();
    } else {
      ProgressSample sample;
      sample.at = now;
      std::vector<pid_t> watch;
      for (const auto& w : workers_) {
        const double cpu = w.running ? TreeCpuSeconds(w.pid) : 0;
        std::string wait;
        // A worker that computed silently since the last sample may be
        // spinning on its GPU instead (hang.h): was its main thread at one
        // device wait all along, and is it still to be watched.
        if (progress_->BusyAndSilent(sample.cpu_seconds.size(), sample.at, cpu, *w.output_bytes)) {
          wait = device_waits_->Take(w.pid);
          watch.push_back(w.pid);
        }
        sample.cpu_seconds.push_back(cpu);
        sample.output_bytes.push_back(*w.output_bytes);
        sample.device_wait.push_back(std::move(wait));
      }
      device_waits_->Watch(watch);
      quiet_s_ = progress_->Quiet(std::move(sample));
      const bool quiet = *quiet_s_ >= config_.hang_timeout_s;
      if (!hang_groups_.empty()) {
        if (second_timeout_ && second_timeout_->Due(quiet, now)) FailHung();
      } else if (quiet && !asking_ && now >= next_ask_at_) {
        JudgeHang();
      }
    }
    if (!Watching()) return device_waits_->Watch({});
    hang_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(kSamplePeriodS)));
    hang_timer_.async_wait([this](std::error_code ec) {
      if (!ec) OnProgressSample();
    });
  }

  // This node has been quiet for the timeout, or has finished. Group rank 0
  // judges the job (hang.h): it asks every peer how long its workers have
  // been quiet. With --hang-action fail, another node asks group rank 0 for
  // its verdict, to fail its own odd ranks: the job's root cause is theirs.
  void JudgeHang() {
    const int attempt = attempts_;
    if (round_->participants.size() == 1) {
      std::vector<StackTarget> targets;
      for (const auto& w : workers_) {
        if (w.running) targets.push_back({w.global_rank, w.local_rank, w.pid, "running"});
      }
      auto job = nlohmann::ordered_json::array();
      job.push_back(
          ReadStacks(targets, {hostname_, config_.rdzv_id, round_->group_rank, round_->number}));
      return ReportHang(job);
    }
    const bool judge = round_->group_rank == 0;
    if (!judge && !config_.hang_fail) return;
    asking_ = true;
    telemetry_.AskPeers("hang", judge ? std::nullopt : std::optional<int>(0),
                        [this, attempt, judge](std::vector<PeerNode> peers,
                                               std::vector<Result<nlohmann::json>> answers) {
                          if (attempt != attempts_ || !Watching()) return;
                          asking_ = false;
                          if (judge) return OnPeersQuiet(peers, answers);
                          if (!answers.empty() && answers[0].ok()) return OnVerdict(*answers[0]);
                          next_ask_at_ = SteadySeconds() + config_.hang_timeout_s;
                        });
  }

  void OnPeersQuiet(const std::vector<PeerNode>& peers,
                    const std::vector<Result<nlohmann::json>>& answers) {
    std::vector<NodeQuiet> nodes{
        {round_->group_rank, Finished() ? std::nullopt : quiet_s_, "", Finished()}};
    for (size_t i = 0; i < peers.size() && i < answers.size(); ++i) {
      NodeQuiet n = QuietOf(peers[i].node_rank, round_->number, answers[i]);
      // A failed exchange names the address already; an odd answer does not.
      if (!n.quiet_s && answers[i].ok()) n.error = peers[i].address + ": " + n.error;
      nodes.push_back(std::move(n));
    }
    const JobVerdict v = JudgeJob(nodes, config_.hang_timeout_s);
    if (v.hung) {
      const int attempt = attempts_;
      asking_ = true;
      return telemetry_.GatherJobStacks([this, attempt](const nlohmann::ordered_json& job) {
        if (attempt != attempts_ || !Watching()) return;
        asking_ = false;
        ReportHang(job);
      });
    }
    next_ask_at_ = SteadySeconds() + v.recheck_in_s;
    if (v.unknown.empty() || warned_unknown_) return;
    warned_unknown_ = true;
    std::string why;
    for (const auto& n : v.unknown) {
      why += fmt::format("{}node {}: {}", why.empty() ? "" : "; ", n.node_rank, n.error);
    }
    log::Warning(
        "--hang-timeout: {}, but no hang is declared while a node of the job cannot be asked "
        "({}); asking again every {:g} s",
        Finished() ? std::string("this node's workers have finished")
                   : fmt::format("this node's workers made no progress for {:g} s",
                                 config_.hang_timeout_s),
        why, config_.hang_timeout_s);
  }

  // Group rank 0's answer, for a node that fails its own odd ranks.
  void OnVerdict(const nlohmann::json& answer) {
    auto groups = VerdictOf(round_->number, answer);
    if (!groups) {
      // No verdict before the judge has been quiet for the timeout, and
      // then within a second or two: ask about every second.
      double lacks = 0;
      if (auto q = answer.find("quiet_seconds"); q != answer.end() && q->is_number()) {
        lacks = config_.hang_timeout_s - q->get<double>();
      }
      next_ask_at_ = SteadySeconds() + std::max(1.0, lacks);
      return;
    }
    hang_groups_ = std::move(*groups);
    hang_summary_ = HangSummary(hang_groups_);
    // Nothing to fail here when no odd rank is ours: the judge, or the node
    // that has it, fails the round. But a judge whose workers have finished
    // has nothing to fail: where it names nobody, every node that still
    // runs fails its own ranks.
    auto finished = answer.find("finished");
    const bool judge_finished = finished != answer.end() && *finished == true;
    if (OddHere() || (judge_finished && !Named())) AfterFlightRecorders([this] { FailHung(); });
  }

  bool Named() const {
    return std::any_of(hang_groups_.begin(), hang_groups_.end(),
                       [](const HangGroup& g) { return g.odd; });
  }

  // Asks this node's running workers for their NCCL flight recorders' dumps
  // (flight_recorder.h; only those whose user turned the recorder's pipe
  // on), then runs `then` on the loop, unless the attempt ended meanwhile:
  // before --hang-action fail stops them, so that the dumps are written.
  void AfterFlightRecorders(std::function<void()> then) {
    std::vector<DumpTarget> targets;
    for (const auto& w : workers_) {
      if (w.running) targets.push_back({w.global_rank, w.pid});
    }
    const int attempt = attempts_;
    telemetry_.DumpFlightRecorders(std::move(targets), [this, attempt, then = std::move(then)] {
      if (attempt == attempts_ && state_ == State::kRunning) then();
    });
  }

  bool OddHere() const {
    return std::any_of(hang_groups_.begin(), hang_groups_.end(), [this](const HangGroup& g) {
      return g.odd && std::any_of(workers_.begin(), workers_.end(), [&](const Worker& w) {
               return std::count(g.ranks.begin(), g.ranks.end(), w.global_rank) > 0;
             });
    });
  }

  // The one report of the attempt, for the whole job (`job`: every node's
  // stacks document): where each rank is, the odd ones with their stacks.
  void ReportHang(const nlohmann::ordered_json& job) {
    hang_groups_ = GroupStacks(JobRankStacks(job));
    hang_summary_ = HangSummary(hang_groups_);
    log::Error(
        "no progress for {:g} s on any of the job's {} node(s): no worker used more than {:g}% of "
        "a core or wrote output; where each rank is:",
        config_.hang_timeout_s, job.size(), kIdleCpuFraction * 100);
    for (const auto& g : hang_groups_) {
      log::Error("{}", HangLine(g));
      if (!g.odd) continue;
      std::vector<nlohmann::json> odd;
      for (const auto& node : job) {
        auto only = node;
        only["workers"] = nlohmann::ordered_json::array();
        for (const auto& w : node["workers"]) {
          if (std::count(g.ranks.begin(), g.ranks.end(), w.value("rank", -1))) {
            only["workers"].push_back(w);
          }
        }
        if (!only["workers"].empty()) odd.push_back(nlohmann::json(only));
      }
      log::Error("{}", FormatStacks(odd));
    }
    for (const auto& node : job) {
      if (auto e = node.find("error"); e != node.end() && e->is_string()) {
        log::Error("node {}: no stacks: {}", node.value("node_rank", -1), e->get<std::string>());
      }
    }
    telemetry_.GroupHung(config_.hang_timeout_s, hang_groups_, hang_summary_);
    // A finished judge has no rank to fail, and `then` does not run once
    // the workers are gone: the nodes that run fail theirs on this verdict
    // (OnVerdict).
    AfterFlightRecorders([this] { ActOnHang(); });
  }

  // --hang-action fail, once the report is out and the dumps are in.
  void ActOnHang() {
    if (!config_.hang_fail) return;
    if (!Named() || OddHere()) return FailHung();
    // The odd ranks are elsewhere: their nodes fail them, on this verdict.
    second_timeout_.emplace(config_.hang_timeout_s);
    second_timeout_->Due(true, SteadySeconds());
  }

  // --hang-action fail: the odd ranks here hung (else, when none is here,
  // every rank here waits on them); the attempt fails as on a worker
  // failure.
  void FailHung() {
    const bool odd_here = OddHere();
    std::string odd_where;
    for (const auto& g : hang_groups_) {
      if (g.odd) odd_where += fmt::format("{}{}", odd_where.empty() ? "" : "; ", HangLine(g));
    }
    std::vector<int> hung;
    std::string where;
    for (const auto& g : hang_groups_) {
      if (odd_here && !g.odd) continue;
      for (auto& w : workers_) {
        if (!w.running || !std::count(g.ranks.begin(), g.ranks.end(), w.global_rank)) continue;
        w.hang = fmt::format("no progress for {:g} s; {}", config_.hang_timeout_s, g.where);
        if (!odd_here && !odd_where.empty()) w.hang += "; the job waits on " + odd_where;
        hung.push_back(w.global_rank);
        where += fmt::format("{}{} {}", where.empty() ? "" : "; ", FormatRanks({w.global_rank}),
                             g.where);
      }
    }
    if (hung.empty()) return;
    hang_failing_ = true;
    restart_cause_ = "failure";
    restart_reason_ = fmt::format("hung for {:g} s: {}", config_.hang_timeout_s,
                                  !odd_here && !odd_where.empty() ? odd_where : where);
    log::Error("--hang-action fail: stopping the workers ({})", restart_reason_);
    telemetry_.GroupStopping("hang", restart_reason_, SIGTERM);
    rdzv_->Failed(restart_reason_);
    StopWorkers(SIGTERM, [this] { AfterStop(); });
  }

  // ---- events ---------------------------------------------------------------

  void WatchSignals() {
    for (int sig : config_.signals_to_handle) signals_.add(sig);
    signals_.async_wait([this](std::error_code ec, int sig) {
      if (ec) return;
      OnSignal(sig);
      if (!stopped_) WatchSignals();
    });
  }

  void OnWorkerExit(const proc::GroupExit& e) {
    Worker* found = nullptr;
    for (auto& w : workers_) {
      if (w.pid == e.pid && w.running) found = &w;
    }
    if (!found) return;
    Worker& w = *found;
    w.running = false;
    w.exitcode = e.exitcode;
    w.stopped = e.stopped;
    const int64_t exited_at = NowSeconds();
    // Everything the worker wrote is in its pipes by now: take it before
    // anything is reported, so a crash never loses its last lines.
    w.output.Drain();
    if (timers_) timers_->ClearPid(w.pid);
    FailureCause cause = !w.watchdog.empty() ? FailureCause::kWatchdog
                         : w.exitcode < 0    ? FailureCause::kSignal
                                             : FailureCause::kExitCode;
    if (state_ == State::kRunning && w.exitcode != 0) {
      // Said at once, in torch's words, before the siblings are stopped.
      log::Error("failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", w.exitcode,
                 w.local_rank, w.pid, config_.worker_argv[0]);
      WorkerFailure f = Describe(w, exited_at, /*last_lines=*/true);
      if (!w.watchdog.empty()) f.message += "\n  watchdog: " + w.watchdog;
      failures_.Add(std::move(f));
    } else if (state_ == State::kStopping && !w.hang.empty()) {
      // Stopped because it hung (--hang-action fail): the root cause.
      WorkerFailure f = Describe(w, exited_at, /*last_lines=*/true);
      f.message += "\n  hung: " + w.hang;
      failures_.Add(std::move(f));
    } else if (state_ == State::kStopping && w.exitcode != 0) {
      WorkerFailure f = Describe(w, exited_at, /*last_lines=*/!stop_for_own_failure_);
      if (stop_for_own_failure_) {
        // A sibling stopped because of that failure: torchrun 2.x lists it.
        f.stopped = true;
        failures_.Add(std::move(f));
      } else if (!f.error_json.empty() && f.written_ns < stop_asked_ns_) {
        // Stopped for another reason (another node's failure ended the
        // round, a signal), but its error file is older than the stop: it
        // failed before, and was reaped only after the stop began. Often it
        // is the job's root cause, and the other node's failure only its
        // echo (a peer that saw this worker's connections close); this node
        // then reports it (table, error file) as torchrun's agent would,
        // and /health and the events call it failed, not stopped.
        w.stopped = false;
        cause = FailureCause::kErrorFile;
        failures_.Add(std::move(f));
      }
    }
    telemetry_.WorkerExited(w.local_rank, w.global_rank, w.pid, w.exitcode, w.stopped, cause);
  }

  // A worker's failure as the report shows it: its error file read, and,
  // for a failure of its own, its last lines of output.
  WorkerFailure Describe(const Worker& w, int64_t exited_at, bool last_lines) const {
    WorkerFailure f = failure::DescribeFailure(w.local_rank, w.global_rank, w.pid, w.exitcode,
                                               w.output.error_file, exited_at, w.output.Tail(true));
    if (last_lines) {
      f.last_lines = failure::FormatLastLines(f, w.output.Tail(false), w.output.Tail(true),
                                              static_cast<size_t>(config_.failure_lines));
    }
    return f;
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
      case State::kStarting:
        h.state = "INIT";
        break;
      case State::kRunning:
        h.state = failures_.empty() ? "HEALTHY" : "UNHEALTHY";
        break;
      case State::kStopping:
        h.state = pending_signal_ != 0 ? "STOPPED" : "UNHEALTHY";
        break;
      case State::kDone:
        h.state = exit_code_ == kExitSuccess  ? "SUCCEEDED"
                  : exit_code_ == kExitFailed ? "FAILED"
                                              : "STOPPED";
        break;
    }
    if (round_) {
      h.round = round_->number;
      h.node_rank = round_->group_rank;
      h.restarts = round_->failures;
    }
    h.attempts = attempts_;
    h.hang = hang_summary_;
    if (state_ == State::kRunning) h.quiet_s = quiet_s_;
    h.hang_timeout_s = config_.hang_timeout_s;
    h.hang_groups = hang_groups_;
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

  // After each batch of exits: what they mean for the group.
  void AfterExits() {
    if (state_ != State::kRunning) return;
    if (config_.end_at_first_worker_exit) return EndAtFirstWorkerExit();
    if (!failures_.empty()) {
      const auto& root = failures_.root();
      restart_cause_ = "failure";
      restart_reason_ = fmt::format("rank {} (local_rank {}, pid {}) exited with {}",
                                    root.global_rank, root.local_rank, root.pid, root.exitcode);
      telemetry_.GroupStopping("failure", restart_reason_, SIGTERM);
      rdzv_->Failed(restart_reason_);
      StopWorkers(SIGTERM, [this] { AfterStop(); });
      return;
    }
    if (workers_sup_->live() == 0) {
      CloseAttempt();
      telemetry_.GroupSucceeded();
      // The exit barrier: done once every node of the round is.
      state_ = State::kWaiting;
      succeeded_ = true;
      rdzv_->Succeeded([this] { Finish(kExitSuccess); });
    }
  }

  // --signals-to-handle SIGCHLD: torchrun's handler raises on the SIGCHLD of
  // the first worker exit, whatever its exit code, and its agent stops the
  // others and ends; trun ends there too, as for a handled signal, and says
  // why instead of a traceback.
  void EndAtFirstWorkerExit() {
    log::Error(
        "a worker exited, and --signals-to-handle lists SIGCHLD, which every worker exit sends: "
        "the job ends here, as under torchrun; leave SIGCHLD out of --signals-to-handle");
    pending_signal_ = SIGCHLD;
    telemetry_.GroupStopping("signal", "received SIGCHLD", SIGTERM);
    StopWorkers(SIGTERM, [this] { AfterStop(); });
  }

  // Once every worker of a stop has exited, whatever began it (a failure, a
  // hang, the round's end, a signal): a signal ends trun, with the root
  // cause of a worker that had failed before it written; else on to the
  // next round.
  void AfterStop() {
    CloseAttempt();
    if (pending_signal_ != 0) {
      WriteRootCause();
      Finish(ExitForSignal(pending_signal_));
      return;
    }
    // The rendezvous counts a failed round against the job's budget and
    // answers with the next round or with the news that it is spent.
    state_ = State::kWaiting;
    AskForRound();
  }

  void ReportFinalFailure() {
    const int64_t restarts = round_ ? round_->failures : 0;
    std::string table =
        failure::FormatFailureTable(config_.entrypoint_name, failures_.all(), hostname_);
    // The root cause's last words first: torchrun's table stays last, and
    // as torchrun prints it.
    const auto& root = failures_.root();
    if (!root.last_lines.empty()) log::Error("{}", root.last_lines);
    log::Error("worker group failed{}:{}",
               config_.max_restarts > 0
                   ? fmt::format(" after {} restart{}", restarts, restarts == 1 ? "" : "s")
                   : "",
               table);
    WriteRootCause();
  }

  // The agent's own error file gets the attempt's root cause, also when a
  // signal (a scheduler stopping the job) ends trun after a worker failed:
  // whoever stopped it still learns why the job failed. So does the failure
  // report a program that runs trun asked for ($TRUN_FAILURE_JSON).
  void WriteRootCause() {
    if (!failure_json_.empty() && !failures_.empty()) {
      Status s = failure::WriteFailureReport(
          failure_json_, failure::FailureReportJson(config_.entrypoint_name, failures_, hostname_,
                                                    round_ ? round_->failures : 0));
      if (!s.ok()) log::Warning("TRUN_FAILURE_JSON: {}", s.message());
    }
    if (own_error_file_.empty() || failures_.empty()) return;
    Status s = failure::WriteAgentErrorFile(own_error_file_, failures_.root());
    if (!s.ok()) log::Warning("{}", s.message());
  }

  void OnSignal(int sig) {
    if (state_ == State::kDone) return Stop();
    if (pending_signal_ != 0) {
      // A second signal while stopping: no more grace.
      log::Warning("received {} again; killing workers now", proc::SignalName(sig));
      workers_sup_->KillStopping();
      return;
    }
    pending_signal_ = sig;
    log::Warning("received {}; stopping workers", proc::SignalName(sig));
    if (state_ == State::kStopping) {
      // Already stopping after a failure: AfterStop sees pending_signal_.
      return;
    }
    if (state_ == State::kWaiting || state_ == State::kStarting) {
      WriteRootCause();
      Finish(ExitForSignal(sig));
      return;
    }
    telemetry_.GroupStopping("signal", "received " + proc::SignalName(sig), sig);
    StopWorkers(sig, [this] { AfterStop(); });
  }

  // Signals every live worker's process group, then SIGKILLs what is left
  // after TORCH_ELASTIC_SHUTDOWN_TIMEOUT; `then` runs once all have exited.
  void StopWorkers(int sig, std::function<void()> then) {
    state_ = State::kStopping;
    stop_for_own_failure_ = !failures_.empty() || hang_failing_;
    // The clock the kernel dates files by: an error file written after
    // this moment is never dated before it (CLOCK_REALTIME runs up to a
    // tick ahead of it). A file server's clock is another matter.
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
    stop_asked_ns_ = now.tv_sec * 1'000'000'000LL + now.tv_nsec;
    workers_sup_->StopAll(sig,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::duration<double>(config_.shutdown_timeout_s)),
                          std::move(then));
  }

  // Ends an attempt: whatever is left of each worker's process group
  // (grandchildren) is killed, output is drained, files are closed.
  void CloseAttempt() {
    if (timers_) timers_->Clear();
    for (auto& w : workers_) {
      if (w.pid > 0) workers_sup_->Release(w.pid);
      w.output.Close();
    }
    attempt_files_.reset();
  }

  void Finish(int code) {
    state_ = State::kDone;
    exit_code_ = code;
    telemetry_.Shutdown(code);
    // Descendants that left their worker's group were reparented to us (a
    // subreaper); none may outlive the job.
    if (workers_sup_) workers_sup_->KillOrphans();
    // A host lingers until the other nodes have read how the job ended; a
    // signal meanwhile (OnSignal) cuts that short.
    if (!rdzv_) return Stop();
    rdzv_->Leave([this] { Stop(); });
  }

  void Stop() {
    stopped_ = true;
    hang_timer_.cancel();
    if (rdzv_) rdzv_->Shutdown();
    signals_.cancel();
    io_.stop();
  }

  LaunchConfig config_;
  ProcessTableFactory make_table_;
  asio::io_context io_{1};
  asio::signal_set signals_;
  std::unique_ptr<proc::Loop> loop_;  // the supervisor's clock
  std::unique_ptr<proc::ProcessTable> table_;
  std::optional<proc::GroupSupervisor> workers_sup_;

  Telemetry telemetry_;
  std::unique_ptr<FileTimerServer> timers_;  // the watchdog, when enabled
  std::string watchdog_dir_;                 // its private directory, when we made one
  std::unique_ptr<rendezvous::Rendezvous> rdzv_;
  // --store-relay: this attempt's relay, and the thread of its handshake.
  std::unique_ptr<store::Relay> relay_;
  std::thread relay_thread_;
  bool stopped_ = false;  // Stop() ran: the loop is ending
  std::optional<rendezvous::Round> round_;
  std::string hostname_;
  std::string short_hostname_ = ShortHostname();
  std::string own_error_file_;
  std::string failure_json_;  // $TRUN_FAILURE_JSON: "", a path, or "-" for stderr
  std::string run_log_dir_;
  std::optional<AttemptFiles> attempt_files_;
  int devnull_ = -1;
  int stdin_fd_ = -1;
  std::vector<std::string> agent_env_;  // our environment, for WorkerEnv

  State state_ = State::kWaiting;
  // The rendezvous's news that no round will come, heard while the workers
  // were not stopped (OnRound).
  std::optional<rendezvous::NoRound> no_round_;
  bool succeeded_ = false;  // every worker exited 0; in the exit barrier
  int attempts_ = 0;        // groups started by this agent
  // Why the group is being restarted, for the next round's event.
  std::string restart_cause_;
  std::string restart_reason_;
  int pending_signal_ = 0;
  int exit_code_ = kExitCannot;
  std::vector<Worker> workers_;
  RankTable rank_table_;  // the workers' ranks, for `trun stack HANDLE`
  // This attempt's failed workers and their root cause.
  failure::AttemptFailures failures_;

  // --hang-timeout, per attempt.
  asio::steady_timer hang_timer_{io_};
  std::optional<ProgressWindow> progress_;
  // Reads the busy, silent workers' main threads between samples (hang.h).
  std::unique_ptr<DeviceWaitWatcher> device_waits_;
  std::vector<HangGroup> hang_groups_;           // the job's verdict, once made or heard
  std::string hang_summary_;                     // its one line; "" before it
  std::optional<SecondTimeout> second_timeout_;  // when the judge fails on its own
  bool hang_failing_ = false;                    // --hang-action fail stops the workers
  int64_t stop_asked_ns_ = 0;          // when the last stop began, as ErrorFile::written_ns
  bool stop_for_own_failure_ = false;  // it began for this node's failure or hang
  std::optional<double> quiet_s_;      // how long the workers have been quiet
  bool asking_ = false;                // the peers are being asked
  double next_ask_at_ = 0;             // not before (SteadySeconds)
  bool warned_unknown_ = false;        // said that a node cannot be asked
};

LocalAgent::LocalAgent(launch::LaunchConfig config, ProcessTableFactory table, LoopFactory loop)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(table), std::move(loop))) {}
LocalAgent::~LocalAgent() = default;
int LocalAgent::Run() { return impl_->Run(); }

}  // namespace trun::agent
