// Telemetry: what the agent tells about itself. The agent's state machine
// (agent.cc) calls one method per transition; each writes that transition's
// event (events.h) and moves its metrics (metrics.h). When asked for, an
// HTTP server (http.h) on the same loop answers /health from the agent's
// state, read through a callback at request time, and /metrics. Names,
// fields and the health document are in docs/events.md.
//
// GET /stacks?scope=job asks the other agents of the round on a thread of
// its own (job_stacks.h), so the loop never waits on a peer; the answer
// comes back through the loop. Requests that arrive while one is under way
// share its answer, so there is one such thread at a time. The agent's
// hang watch asks its peers the same way (AskPeers), on a thread of its
// own, one ask at a time.
//
// Thread-safety: the agent's loop thread only.
#pragma once

#include <sys/types.h>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/events.h"
#include "agent/file_timer.h"
#include "agent/flight_recorder.h"
#include "agent/hang.h"
#include "agent/http.h"
#include "agent/job_stacks.h"
#include "agent/metrics.h"
#include "agent/stacks.h"
#include "common/status.h"
#include "rendezvous/rendezvous.h"

namespace trun::agent {

// How long a hang report waits for the flight recorders' dumps: torch's
// heartbeat monitor reads its pipe about once a second.
inline constexpr double kFlightRecorderWaitS = 10;

struct TelemetryOptions {
  bool console_events = false;  // --event-log-handler console
  std::string event_file;       // --event-log-file / TRUN_EVENT_LOG
  std::optional<int> health_port;
  std::string health_addr;
  std::string run_id;
  std::string role;
  std::string hostname;
  int max_restarts = 0;
  // The job token GET /stacks asks proof of (stacks.h); "" for none.
  std::string job_token;
};

// The agent's state as /health shows it.
struct WorkerHealth {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  std::string state;  // running | succeeded | failed | stopped
  std::optional<int> exitcode;
};
struct GroupHealth {
  // torch's WorkerState names: INIT (waiting for a round), HEALTHY,
  // UNHEALTHY (stopping after a failure or the round's end), STOPPED (on a
  // signal), SUCCEEDED, FAILED.
  std::string state = "INIT";
  std::optional<int64_t> round;
  std::optional<int> node_rank;
  int64_t restarts = 0;  // failed rounds, job-wide
  int attempts = 0;      // groups this agent started
  std::vector<WorkerHealth> workers;
  // The attempt's hang report in one line (hang.h's HangSummary); "" while
  // none was made.
  std::string hang;
  // --hang-timeout: how long the workers have been quiet (none: not
  // watched), the timeout, and the report's groups once made.
  std::optional<double> quiet_s;
  double hang_timeout_s = 0;
  std::vector<HangGroup> hang_groups;
};

// 200 (healthy) or 503, and the JSON body.
bool IsHealthy(const GroupHealth& h);
std::string EncodeHealth(const GroupHealth& h, const TelemetryOptions& o);

// Why a worker's exit failed the group. kErrorFile: trun stopped it for
// another reason, but its error file predates the stop (it failed first,
// and was reaped late), so its exit code or signal is the stop's, not its.
enum class FailureCause { kExitCode, kSignal, kWatchdog, kErrorFile };

class Telemetry {
 public:
  Telemetry() = default;
  // Waits for a job-wide /stacks under way (kJobStacksBudget at most).
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // Opens the event sink and starts the HTTP server when a port is given.
  // Every failure is an InvalidArgument naming the flag to change: the
  // file, address and port all come from the user (--event-log-file,
  // --health-check-addr, --health-check-port).
  Status Start(asio::io_context& io, TelemetryOptions options, std::function<GroupHealth()> health);
  // The port /health is served on; 0 when it is not.
  int health_port() const;
  // The watchdog, whose counters /metrics shows; null when there is none.
  void set_timer_server(const FileTimerServer* timers) { timers_ = timers; }

  void AgentStarted(const std::string& timer_file);
  void RendezvousStarted();
  void RendezvousCompleted(const rendezvous::Round& round);
  // The rendezvous gave no round: it timed out or failed (its kind says).
  void RendezvousFailed(const rendezvous::NoRound& none);
  void WorkerStarted(int local_rank, int rank, pid_t pid);
  // `stopped`: the agent had asked it to stop. `cause` matters only for a
  // failure (not stopped, exit code not 0).
  void WorkerExited(int local_rank, int rank, pid_t pid, int exitcode, bool stopped,
                    FailureCause cause);
  // The agent stops its workers: cause is failure | round_ended | signal |
  // launch_error.
  void GroupStopping(std::string_view cause, std::string_view reason, int signal);
  // A new round starts the group again; cause is failure, peer_failure or
  // membership.
  void Restarting(std::string_view cause, std::string_view reason);
  void GroupSucceeded();
  void GroupFailed(std::string_view reason);
  // --hang-timeout found no progress for `idle_s`: where each rank is.
  void GroupHung(double idle_s, const std::vector<HangGroup>& groups, const std::string& summary);
  void WatchdogExpired(const TimerRequest& timer, int local_rank, double sent_at, int error);
  void Shutdown(int exit_code);

  // Asks the round's other agents (only node `only_node` when given) for
  // GET /stacks?scope=`scope`, off the loop, within kJobStacksBudget; then
  // runs `done` on the loop with the peers asked and one answer each,
  // unless the telemetry is gone. One ask at a time: a second one waits
  // for the first to end. `done` may ask again.
  using PeersAnswered =
      std::function<void(std::vector<PeerNode>, std::vector<Result<nlohmann::json>>)>;
  void AskPeers(const std::string& scope, std::optional<int> only_node, PeersAnswered done);
  // The whole job's stacks (GET /stacks?scope=job's answer), then `done`
  // on the loop; shares an answer under way.
  void GatherJobStacks(std::function<void(const nlohmann::ordered_json&)> done);
  // NCCL's flight recorder (flight_recorder.h): asks each of `workers`
  // whose recorder listens on its dump pipe for a dump, off the loop, and
  // waits for them at most kFlightRecorderWaitS; then, on the loop, logs
  // and emits what came (trun.group.flight_recorder, when any worker had a
  // pipe) and runs `done`, unless the telemetry is gone.
  void DumpFlightRecorders(std::vector<DumpTarget> workers, std::function<void()> done);
  // Bytes of worker output that passed through the agent.
  void LogBytes(bool is_stderr, size_t n) { log_bytes_[is_stderr ? 1 : 0] += n; }

 private:
  void Emit(std::string_view name, nlohmann::ordered_json fields);
  void Serve(const HttpRequest& req, HttpServer::Responder reply);
  void ServeStacks(const HttpRequest& req, HttpServer::Responder reply);
  // This node's document (every worker of the current attempt), read on a
  // thread of its own and handed to `done` on the loop. Requests that
  // arrive while a read is under way share it, so a flood of /stacks costs
  // one read at a time and the loop, which serves /health and the hang
  // watch, never waits for one.
  void ReadLocalStacks(std::function<void(const nlohmann::ordered_json&)> done);
  // Asks the round's other agents, unless that is under way already; every
  // waiting request gets the answer.
  void AnswerJobStacks(int local_node_rank, const std::vector<PeerNode>& peers,
                       std::vector<Result<nlohmann::json>> answers);
  // Runs FetchPeerStacks on `thread` (joined first), then `done` on the loop.
  void AskOffLoop(std::thread& thread, std::vector<PeerNode> peers, const std::string& scope,
                  size_t max_bytes, PeersAnswered done);
  // Copies counters kept elsewhere (store, watchdog, HTTP, logs) into the
  // registry, just before it is rendered.
  void Collect();

  TelemetryOptions options_;
  std::function<GroupHealth()> health_;
  EventSink sink_;
  MetricsRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
  StacksGate stacks_gate_{""};
  asio::io_context* io_ = nullptr;
  // Job-wide /stacks: who waits for the answer, the thread that asks the
  // peers, the hang watch's, and what tells their answers whether we are
  // still here.
  std::vector<std::function<void(const nlohmann::ordered_json&)>> job_stacks_waiting_;
  std::thread job_stacks_thread_;
  std::vector<std::function<void(const nlohmann::ordered_json&)>> local_stacks_waiting_;
  std::thread local_stacks_thread_;
  std::thread hang_thread_;
  std::thread flight_recorder_thread_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  const FileTimerServer* timers_ = nullptr;
  std::optional<rendezvous::Round> round_;
  std::optional<std::chrono::steady_clock::time_point> rdzv_started_;
  uint64_t log_bytes_[2] = {0, 0};
};

}  // namespace trun::agent
