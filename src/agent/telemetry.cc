#include "agent/telemetry.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "common/exit_code.h"
#include "common/log.h"
#include "proc/signals.h"
#include "store/server.h"

namespace trun::agent {
namespace {

using ojson = nlohmann::ordered_json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ojson SignalOrNull(int sig) { return sig > 0 ? ojson(proc::SignalName(sig)) : ojson(nullptr); }

const char* CauseName(FailureCause c) {
  switch (c) {
    case FailureCause::kExitCode:
      return "exit_code";
    case FailureCause::kSignal:
      return "signal";
    case FailureCause::kWatchdog:
      return "watchdog";
    case FailureCause::kErrorFile:
      return "error_file";
  }
  return "exit_code";
}

// The declared metrics, in the order /metrics shows them.
struct MetricRow {
  const char* name;
  MetricType type;
  const char* help;
};
constexpr MetricRow kMetrics[] = {
    {"trun_agent_info", MetricType::kGauge, "Always 1; the labels describe the agent."},
    {"trun_group_healthy", MetricType::kGauge, "1 while /health answers 200, else 0."},
    {"trun_round", MetricType::kGauge, "The current round (TORCHELASTIC_RESTART_COUNT)."},
    {"trun_node_rank", MetricType::kGauge, "This node's rank in the current round."},
    {"trun_world_size", MetricType::kGauge, "Workers in the current round, on every node."},
    {"trun_workers", MetricType::kGauge, "This node's workers of the current attempt, by state."},
    {"trun_worker_starts_total", MetricType::kCounter, "Workers this agent started."},
    {"trun_worker_failures_total", MetricType::kCounter,
     "Workers that failed the group, by cause (exit_code, signal, watchdog)."},
    {"trun_restarts_total", MetricType::kCounter,
     "Times this agent restarted its group, by cause (failure, peer_failure, membership)."},
    {"trun_restarts_spent", MetricType::kGauge,
     "Failed rounds counted against --max-restarts, job-wide."},
    {"trun_rendezvous_duration_seconds", MetricType::kSummary,
     "Time from asking the rendezvous for a round to getting it."},
    {"trun_rendezvous_last_duration_seconds", MetricType::kGauge, "The last rendezvous' duration."},
    {"trun_rendezvous_failures_total", MetricType::kCounter,
     "Rendezvous that gave no round, by kind (timeout, error)."},
    {"trun_store_requests_total", MetricType::kCounter,
     "Requests this agent's store handled, by operation."},
    {"trun_store_connections", MetricType::kGauge, "Clients connected to this agent's store."},
    {"trun_store_connections_total", MetricType::kCounter, "Clients this agent's store accepted."},
    {"trun_store_links", MetricType::kGauge,
     "Relays' links open on this agent's store (--store-relay): each carries a node's workers "
     "over one of its connections."},
    {"trun_store_clients_dropped_total", MetricType::kCounter,
     "Clients the store dropped for breaking the protocol or a limit."},
    {"trun_store_clients_refused_total", MetricType::kCounter,
     "Clients the store refused: not a host of the job's current round (docs/rendezvous.md)."},
    {"trun_log_bytes_total", MetricType::kCounter,
     "Bytes of worker output that passed through the agent (teed streams), by stream."},
    {"trun_watchdog_timers", MetricType::kGauge, "Watchdog timers held."},
    {"trun_watchdog_requests_total", MetricType::kCounter,
     "Watchdog requests, by result (set, released, rejected, malformed)."},
    {"trun_watchdog_expired_total", MetricType::kCounter, "Watchdog timers that expired."},
    {"trun_watchdog_signal_delay_seconds", MetricType::kSummary,
     "Time from a timer's expiration to its signal."},
    {"trun_http_responses_total", MetricType::kCounter,
     "Responses of the health server, by status code."},
    {"trun_http_timeouts_total", MetricType::kCounter,
     "Health-server clients closed for not finishing in time."},
    {"trun_http_evicted_total", MetricType::kCounter,
     "Health-server clients closed to make room for a new one."},
};

}  // namespace

bool IsHealthy(const GroupHealth& h) { return h.state == "HEALTHY" || h.state == "SUCCEEDED"; }

std::string EncodeHealth(const GroupHealth& h, const TelemetryOptions& o) {
  ojson workers = ojson::array();
  for (const auto& w : h.workers) {
    ojson j;
    j["local_rank"] = w.local_rank;
    j["rank"] = w.rank;
    j["pid"] = w.pid;
    j["state"] = w.state;
    j["exitcode"] = w.exitcode ? ojson(*w.exitcode) : ojson(nullptr);
    j["restarts"] = std::max(0, h.attempts - 1);
    workers.push_back(std::move(j));
  }
  ojson j;
  j["status"] = IsHealthy(h) ? "healthy" : "unhealthy";
  j["state"] = h.state;
  j["run_id"] = o.run_id;
  j["hostname"] = o.hostname;
  j["round"] = h.round ? ojson(*h.round) : ojson(nullptr);
  j["node_rank"] = h.node_rank ? ojson(*h.node_rank) : ojson(nullptr);
  j["restarts"] = h.restarts;
  j["max_restarts"] = o.max_restarts;
  j["workers"] = std::move(workers);
  j["hang"] = h.hang.empty() ? ojson(nullptr) : ojson(h.hang);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Telemetry::~Telemetry() {
  if (job_stacks_thread_.joinable()) job_stacks_thread_.join();
  if (local_stacks_thread_.joinable()) local_stacks_thread_.join();
  if (hang_thread_.joinable()) hang_thread_.join();
  if (flight_recorder_thread_.joinable()) flight_recorder_thread_.join();
}

Status Telemetry::Start(asio::io_context& io, TelemetryOptions options,
                        std::function<GroupHealth()> health) {
  io_ = &io;
  options_ = std::move(options);
  health_ = std::move(health);
  stacks_gate_ = StacksGate(options_.job_token);
  auto sink = EventSink::Open(options_.console_events, options_.event_file);
  if (!sink.ok()) return sink.status();
  sink_ = std::move(*sink);
  for (const auto& m : kMetrics) metrics_.Declare(m.name, m.type, m.help);
  metrics_.Set("trun_agent_info", 1,
               {{"run_id", options_.run_id}, {"role", options_.role}, {"version", TRUN_VERSION}});
  if (options_.health_port) {
    HttpServer::Options ho;
    ho.host = options_.health_addr;
    ho.port = *options_.health_port;
    auto server =
        HttpServer::Start(io, ho, [this](const HttpRequest& req, HttpServer::Responder reply) {
          Serve(req, std::move(reply));
        });
    if (!server.ok()) {
      // Which flag to change depends on what failed: the address or the port.
      return Status::InvalidArgument(
          server.status().code() == StatusCode::kInvalidArgument
              ? fmt::format("{}; give --health-check-addr an IP such as 127.0.0.1 or ::",
                            server.status().message())
              : fmt::format("{}; pick another --health-check-port (0: a free one)",
                            server.status().message()));
    }
    http_ = std::move(*server);
    log::Info("health check at http://{}:{}/health, metrics at /metrics, stacks at /stacks",
              options_.health_addr.empty() ? options_.hostname : options_.health_addr,
              http_->port());
  }
  return Status::OK();
}

int Telemetry::health_port() const { return http_ ? http_->port() : 0; }

void Telemetry::Emit(std::string_view name, ojson fields) {
  if (!sink_.enabled()) return;
  ojson md;
  md["run_id"] = options_.run_id;
  md["hostname"] = options_.hostname;
  md["agent_pid"] = ::getpid();
  md["role"] = options_.role;
  md["round"] = round_ ? ojson(round_->number) : ojson(nullptr);
  md["node_rank"] = round_ ? ojson(round_->group_rank) : ojson(nullptr);
  for (auto& [k, v] : fields.items()) md[k] = std::move(v);
  sink_.Write(EncodeEvent(name, NowMs(), md));
}

void Telemetry::AgentStarted(const std::string& timer_file) {
  Emit("trun.agent.started",
       {{"version", TRUN_VERSION},
        {"max_restarts", options_.max_restarts},
        {"health_port", http_ ? ojson(http_->port()) : ojson(nullptr)},
        {"timer_file", timer_file.empty() ? ojson(nullptr) : ojson(timer_file)}});
}

void Telemetry::RendezvousStarted() {
  rdzv_started_ = std::chrono::steady_clock::now();
  Emit("trun.rendezvous.started", ojson::object());
}

void Telemetry::RendezvousCompleted(const rendezvous::Round& round) {
  double seconds =
      rdzv_started_
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *rdzv_started_).count()
          : 0;
  metrics_.Observe("trun_rendezvous_duration_seconds", seconds);
  metrics_.Set("trun_rendezvous_last_duration_seconds", seconds);
  metrics_.Set("trun_round", static_cast<double>(round.number));
  metrics_.Set("trun_node_rank", round.group_rank);
  metrics_.Set("trun_world_size", round.world_size);
  metrics_.Set("trun_restarts_spent", static_cast<double>(round.failures));

  std::optional<rendezvous::Round> previous = std::move(round_);
  round_ = round;
  // The nodes by id in small rounds, where this node read the round's list
  // (rendezvous::Round::participants); group rank 0 reads it at any size,
  // but a 10,000-node round's ids would make one event line of 10,000 ids.
  const bool listed = static_cast<int>(round.participants.size()) == round.nodes &&
                      round.nodes <= rendezvous::kListedNodes;
  ojson ids = ojson::array();
  for (const auto& p : round.participants) ids.push_back(p.id);
  ojson completed = {{"nodes", round.nodes}, {"world_size", round.world_size}};
  if (listed) completed["participants"] = ids;
  completed["store"] = fmt::format("{}:{}", round.store_addr, round.store_port);
  completed["restarts"] = round.failures;
  completed["duration_ms"] = static_cast<int64_t>(seconds * 1000);
  Emit("trun.rendezvous.completed", std::move(completed));

  if (!previous || !listed || static_cast<int>(previous->participants.size()) != previous->nodes ||
      previous->nodes > rendezvous::kListedNodes) {
    return;
  }
  std::set<std::string> before, after;
  for (const auto& p : previous->participants) before.insert(p.id);
  for (const auto& p : round.participants) after.insert(p.id);
  if (before == after) return;
  ojson joined = ojson::array(), left = ojson::array();
  for (const auto& id : after) {
    if (!before.count(id)) joined.push_back(id);
  }
  for (const auto& id : before) {
    if (!after.count(id)) left.push_back(id);
  }
  Emit("trun.membership.changed", {{"nodes", round.nodes}, {"joined", joined}, {"left", left}});
}

void Telemetry::RendezvousFailed(const rendezvous::NoRound& none) {
  const bool timeout = none.kind == rendezvous::NoRound::Kind::kTimedOut;
  metrics_.Add("trun_rendezvous_failures_total", 1, {{"kind", timeout ? "timeout" : "error"}});
  Emit(timeout ? "trun.rendezvous.timed_out" : "trun.rendezvous.failed",
       {{"reason", none.why.message()}});
}

void Telemetry::WorkerStarted(int local_rank, int rank, pid_t pid) {
  metrics_.Add("trun_worker_starts_total", 1);
  Emit("trun.worker.started", {{"local_rank", local_rank}, {"rank", rank}, {"pid", pid}});
}

void Telemetry::WorkerExited(int local_rank, int rank, pid_t pid, int exitcode, bool stopped,
                             FailureCause cause) {
  const bool failed = !stopped && exitcode != 0;
  if (failed) metrics_.Add("trun_worker_failures_total", 1, {{"cause", CauseName(cause)}});
  Emit("trun.worker.exited", {{"local_rank", local_rank},
                              {"rank", rank},
                              {"pid", pid},
                              {"exitcode", exitcode},
                              {"signal", SignalOrNull(exitcode < 0 ? -exitcode : 0)},
                              {"outcome", failed    ? "failed"
                                          : stopped ? "stopped"
                                                    : "succeeded"},
                              {"cause", failed ? ojson(CauseName(cause)) : ojson(nullptr)}});
}

void Telemetry::GroupStopping(std::string_view cause, std::string_view reason, int signal) {
  Emit("trun.group.stopping",
       {{"cause", cause}, {"reason", reason}, {"signal", SignalOrNull(signal)}});
}

void Telemetry::Restarting(std::string_view cause, std::string_view reason) {
  metrics_.Add("trun_restarts_total", 1, {{"cause", std::string(cause)}});
  Emit("trun.group.restarting", {{"cause", cause},
                                 {"reason", reason},
                                 {"restarts", round_ ? round_->failures : 0},
                                 {"max_restarts", options_.max_restarts}});
}

void Telemetry::GroupSucceeded() { Emit("trun.group.succeeded", ojson::object()); }

void Telemetry::GroupFailed(std::string_view reason) {
  Emit("trun.group.failed", {{"reason", reason},
                             {"restarts", round_ ? round_->failures : 0},
                             {"max_restarts", options_.max_restarts}});
}

void Telemetry::GroupHung(double idle_s, const std::vector<HangGroup>& groups,
                          const std::string& summary) {
  ojson list = ojson::array();
  for (const auto& g : groups) {
    list.push_back({{"ranks", g.ranks}, {"where", g.where}, {"odd", g.odd}});
  }
  Emit("trun.group.hung", {{"idle_seconds", idle_s}, {"summary", summary}, {"groups", list}});
}

void Telemetry::WatchdogExpired(const TimerRequest& timer, int local_rank, double sent_at,
                                int error) {
  const double delay = std::max(0.0, sent_at - timer.expiration_time);
  if (timer.signal > 0 && error == 0) metrics_.Observe("trun_watchdog_signal_delay_seconds", delay);
  Emit("trun.watchdog.expired",
       {{"pid", timer.pid},
        {"local_rank", local_rank >= 0 ? ojson(local_rank) : ojson(nullptr)},
        {"scope_id", timer.scope_id},
        {"signal", SignalOrNull(timer.signal)},
        {"expiration_time", timer.expiration_time},
        {"signalled_at", sent_at},
        {"delay_ms", delay * 1000},
        {"error", error ? ojson(std::strerror(error)) : ojson(nullptr)}});
}

void Telemetry::Shutdown(int exit_code) {
  const bool by_signal = exit_code >= ExitForSignal(0);
  const char* outcome = exit_code == kExitSuccess  ? "succeeded"
                        : exit_code == kExitFailed ? "failed"
                        : exit_code == kExitUsage  ? "usage_error"
                        : by_signal                ? "signal"
                                                   : "launch_error";
  Emit("trun.agent.shutdown",
       {{"exit_code", exit_code},
        {"outcome", outcome},
        {"signal", SignalOrNull(by_signal ? exit_code - ExitForSignal(0) : 0)}});
}

void Telemetry::Collect() {
  GroupHealth h = health_();
  metrics_.Set("trun_group_healthy", IsHealthy(h) ? 1 : 0);
  for (const char* state : {"running", "succeeded", "failed", "stopped"}) {
    int n = 0;
    for (const auto& w : h.workers) n += w.state == state ? 1 : 0;
    metrics_.Set("trun_workers", n, {{"state", state}});
  }
  store::StoreStats s = store::ProcessStoreStats();
  for (size_t op = 0; op < store::kNumOps; ++op) {
    metrics_.Set("trun_store_requests_total", static_cast<double>(s.requests[op]),
                 {{"op", store::OpName(static_cast<store::Op>(op))}});
  }
  metrics_.Set("trun_store_connections",
               static_cast<double>(s.connections_accepted - s.connections_closed));
  metrics_.Set("trun_store_connections_total", static_cast<double>(s.connections_accepted));
  metrics_.Set("trun_store_links", static_cast<double>(s.links_opened - s.links_closed));
  metrics_.Set("trun_store_clients_dropped_total", static_cast<double>(s.clients_dropped));
  metrics_.Set("trun_store_clients_refused_total", static_cast<double>(s.clients_refused));
  metrics_.Set("trun_log_bytes_total", static_cast<double>(log_bytes_[0]), {{"stream", "stdout"}});
  metrics_.Set("trun_log_bytes_total", static_cast<double>(log_bytes_[1]), {{"stream", "stderr"}});
  if (timers_) {
    FileTimerServer::Stats t = timers_->stats();
    metrics_.Set("trun_watchdog_timers", static_cast<double>(t.active));
    metrics_.Set("trun_watchdog_expired_total", static_cast<double>(t.expired));
    const std::pair<const char*, uint64_t> results[] = {{"set", t.set},
                                                        {"released", t.released},
                                                        {"rejected", t.rejected},
                                                        {"malformed", t.malformed}};
    for (const auto& [result, n] : results) {
      metrics_.Set("trun_watchdog_requests_total", static_cast<double>(n), {{"result", result}});
    }
  }
  if (http_) {
    const HttpServer::Stats& hs = http_->stats();
    for (const auto& [code, n] : hs.responses) {
      metrics_.Set("trun_http_responses_total", static_cast<double>(n),
                   {{"code", std::to_string(code)}});
    }
    metrics_.Set("trun_http_timeouts_total", static_cast<double>(hs.timed_out));
    metrics_.Set("trun_http_evicted_total", static_cast<double>(hs.evicted));
  }
}

void Telemetry::Serve(const HttpRequest& req, HttpServer::Responder reply) {
  HttpResponse r;
  if (req.path == "/health") {
    GroupHealth h = health_();
    r.status = IsHealthy(h) ? 200 : 503;
    r.content_type = "application/json";
    r.body = EncodeHealth(h, options_) + "\n";
  } else if (req.path == "/metrics") {
    Collect();
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.Render();
  } else if (req.path == "/stacks") {
    return ServeStacks(req, std::move(reply));
  } else if (req.path == "/") {
    r.body =
        "trun agent: /health (200 while the worker group is healthy, else 503), /metrics, "
        "/stacks (every worker's Python stacks; ?scope=job: every node's)\n";
  } else {
    r.status = 404;
    r.body = "not found; try /health, /metrics or /stacks\n";
  }
  reply(std::move(r));
}

void Telemetry::ServeStacks(const HttpRequest& req, HttpServer::Responder reply) {
  HttpResponse r;
  const auto now = StacksGate::Clock::now();
  // The proof comes first: nobody without the token learns anything, nor
  // makes this agent ask its peers.
  const std::string agent = QueryValue(req.target, "agent");
  if (!stacks_gate_.Admit(QueryValue(req.target, "nonce"), QueryValue(req.target, "proof"),
                          req.local, now)) {
    r.status = 401;
    r.headers.emplace_back("X-Trun-Nonce", stacks_gate_.Challenge(now));
    if (!agent.empty() && agent != req.local) {
      // Said at once, so that a user who reaches the agent through a
      // forwarded port learns why a good token is refused.
      r.headers.emplace_back("X-Trun-Refused", "agent-address");
      r.body = fmt::format(
          "the proof is for the agent at {:.60}, but this agent was reached at {}: a forwarded "
          "port or another listener lies between; ask this agent at its own address\n",
          agent, req.local);
    } else {
      r.body =
          "this job has a job token: ask again with ?nonce=NONCE&agent=AGENT&proof=PROOF, NONCE "
          "this reply's X-Trun-Nonce, AGENT the address and port your connection reached "
          "(a.b.c.d:P or [v6]:P), PROOF hex(HMAC-SHA-256(token, \"trun-job-token-v1\\nhttp\\n\" "
          "NONCE \"\\n\" AGENT)); `trun stack` does so with TRUN_JOB_TOKEN\n";
    }
    return reply(std::move(r));
  }
  const std::string scope = QueryValue(req.target, "scope");
  r.content_type = "application/json";
  if (scope == "job") {
    return GatherJobStacks([reply = std::move(reply), r](const ojson& job) mutable {
      r.body = job.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      reply(std::move(r));
    });
  }
  if (scope == "hang") {
    GroupHealth h = health_();
    // SUCCEEDED: every worker exited 0; the agent waits for the others.
    r.body = HangAnswer(h.node_rank, h.round, h.quiet_s, h.state == "SUCCEEDED", h.hang_timeout_s,
                        h.hang_groups)
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
             "\n";
    return reply(std::move(r));
  }
  if (!scope.empty()) {
    r.status = 400;
    r.content_type = "text/plain; charset=utf-8";
    r.body = fmt::format(
        "unknown scope '{:.40}': leave it out for this node's workers, scope=job for every "
        "node's, or scope=hang for its hang watch\n",
        scope);
    return reply(std::move(r));
  }
  ReadLocalStacks([reply = std::move(reply), r](const ojson& doc) mutable {
    r.body = NodeStacksBody(doc, kMaxNodeStacksBytes);
    reply(std::move(r));
  });
}

void Telemetry::ReadLocalStacks(std::function<void(const ojson&)> done) {
  local_stacks_waiting_.push_back(std::move(done));
  if (local_stacks_waiting_.size() > 1) return;  // it shares the read under way
  GroupHealth h = health_();
  std::vector<StackTarget> targets;
  for (const auto& w : h.workers) targets.push_back({w.rank, w.local_rank, w.pid, w.state});
  StacksMeta meta{options_.hostname, options_.run_id, h.node_rank, h.round};
  // The last read posted its answer, which emptied the list: it has ended
  // or is about to.
  if (local_stacks_thread_.joinable()) local_stacks_thread_.join();
  local_stacks_thread_ = std::thread([this, targets = std::move(targets), meta = std::move(meta),
                                      alive = std::weak_ptr<bool>(alive_)] {
    ojson doc = ReadStacks(targets, meta);
    asio::post(*io_, [this, alive, doc = std::move(doc)] {
      if (alive.expired()) return;
      auto waiting = std::move(local_stacks_waiting_);
      local_stacks_waiting_.clear();
      for (auto& d : waiting) d(doc);
    });
  });
}

void Telemetry::GatherJobStacks(std::function<void(const ojson&)> done) {
  job_stacks_waiting_.push_back(std::move(done));
  if (job_stacks_waiting_.size() > 1) return;  // it shares the answer under way
  const int local_node_rank = round_ ? round_->group_rank : 0;
  std::vector<PeerNode> peers = round_ ? PeersOf(*round_) : std::vector<PeerNode>{};
  if (peers.empty()) return AnswerJobStacks(local_node_rank, peers, {});
  AskOffLoop(job_stacks_thread_, std::move(peers), "", kMaxNodeStacksBytes,
             [this, local_node_rank](std::vector<PeerNode> asked,
                                     std::vector<Result<nlohmann::json>> answers) {
               AnswerJobStacks(local_node_rank, asked, std::move(answers));
             });
}

void Telemetry::AskPeers(const std::string& scope, std::optional<int> only_node,
                         PeersAnswered done) {
  std::vector<PeerNode> peers = round_ ? PeersOf(*round_) : std::vector<PeerNode>{};
  if (only_node) {
    std::erase_if(peers, [&](const PeerNode& p) { return p.node_rank != *only_node; });
  }
  // A hang answer is a few hundred bytes; a verdict of many groups, more.
  AskOffLoop(hang_thread_, std::move(peers), scope, size_t{1} << 20, std::move(done));
}

void Telemetry::AskOffLoop(std::thread& thread, std::vector<PeerNode> peers,
                           const std::string& scope, size_t max_bytes, PeersAnswered done) {
  // The last asker posted its answer and ended, or is about to.
  if (thread.joinable()) thread.join();
  thread =
      std::thread([this, peers = std::move(peers), token = options_.job_token, scope, max_bytes,
                   done = std::move(done), alive = std::weak_ptr<bool>(alive_)]() mutable {
        auto answers = FetchPeerStacks(peers, token, scope, kJobStacksBudget, max_bytes);
        asio::post(*io_, [alive, peers = std::move(peers), answers = std::move(answers),
                          done = std::move(done)]() mutable {
          if (alive.expired()) return;
          done(std::move(peers), std::move(answers));
        });
      });
}

void Telemetry::DumpFlightRecorders(std::vector<DumpTarget> workers, std::function<void()> done) {
  if (flight_recorder_thread_.joinable()) flight_recorder_thread_.join();
  flight_recorder_thread_ = std::thread([this, workers = std::move(workers), done = std::move(done),
                                         alive = std::weak_ptr<bool>(alive_)]() mutable {
    auto dumps = CollectDumps(workers, kFlightRecorderWaitS);
    asio::post(*io_, [this, alive, dumps = std::move(dumps), done = std::move(done)] {
      if (alive.expired()) return;
      if (!dumps.empty()) {
        ojson list = ojson::array();
        for (const auto& d : dumps) {
          if (d.error.empty()) {
            log::Error(
                "NCCL flight recorder of rank {}: {} ({} bytes; torch's torchfrtrace reads it)",
                d.rank, d.path, d.bytes);
          } else {
            log::Error("NCCL flight recorder of rank {}: {}", d.rank, d.error);
          }
          list.push_back({{"rank", d.rank},
                          {"pid", d.pid},
                          {"pipe", d.pipe},
                          {"path", d.path},
                          {"bytes", d.error.empty() ? ojson(d.bytes) : ojson(nullptr)},
                          {"error", d.error.empty() ? ojson(nullptr) : ojson(d.error)}});
        }
        Emit("trun.group.flight_recorder", {{"dumps", list}});
      }
      done();
    });
  });
}

void Telemetry::AnswerJobStacks(int local_node_rank, const std::vector<PeerNode>& peers,
                                std::vector<Result<nlohmann::json>> answers) {
  auto shared = std::make_shared<std::vector<Result<nlohmann::json>>>(std::move(answers));
  ReadLocalStacks([this, local_node_rank, peers, shared](const ojson& local) {
    const ojson job = MergeJobStacks(local, local_node_rank, peers, std::move(*shared));
    auto waiting = std::move(job_stacks_waiting_);
    job_stacks_waiting_.clear();
    for (auto& done : waiting) done(job);
  });
}

}  // namespace trun::agent
