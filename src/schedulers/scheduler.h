// The Scheduler interface (TorchX's torchx/schedulers/api.py) and the table
// of schedulers.
//
// A scheduler turns an AppDef plus its run config into a request it can
// print in full (SubmitDryRun; `trun run --dryrun` shows it), submits that
// request (Schedule, giving back the app id of the handle
// SCHEDULER://SESSION/APP_ID), and later answers for the app by id: its
// state mapped to AppState (Describe), its replicas' logs (Log), Cancel,
// Delete and List. Everything a scheduler needs to answer later is kept where the
// scheduler keeps it (the local scheduler: files under
// $XDG_STATE_HOME/trun/local), so any process can ask, not only the one
// that submitted.
//
// Adding a scheduler: implement the class, add a row to the table in
// scheduler.cc. A row without a factory answers "not available yet" (exit 2).
//
// Thread-safety: a Scheduler is used from one thread, except Log(), which
// may run on several threads at once (one per replica being followed).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "schedulers/kubernetes_manifests.h"
#include "schedulers/local_state.h"
#include "schedulers/slurm_batch.h"
#include "specs/app.h"
#include "specs/runopts.h"

namespace trun::schedulers {

// The exact request a scheduler submits, as its own type: the local
// scheduler's every replica's command line, environment additions,
// directory and log files; SLURM's sbatch arguments and script;
// Kubernetes' objects. Schedule() takes the one its DryRun() made.
using SchedulerRequest = std::variant<local::Request, slurm::BatchRequest, kube::Request>;

// The request a scheduler would submit, and what it was made from.
struct DryRunInfo {
  std::string scheduler;
  specs::AppDef app;  // as given, before macros
  specs::Cfg cfg;     // resolved: defaults filled in
  SchedulerRequest request;
  // When set, what `--dryrun` prints instead of the request as YAML (the
  // slurm scheduler's sbatch command and script, exactly).
  std::string text;
  // The request as JSON: what `--dryrun --json` prints, and what the local
  // and slurm schedulers store as the app's request.json.
  nlohmann::ordered_json RequestJson() const;
  // The request as `--dryrun` prints it.
  std::string Format() const;
};

struct DescribeAppResponse {
  std::string app_id;
  std::string name;  // the AppDef's name
  specs::AppState state = specs::AppState::kUnsubmitted;
  int num_restarts = -1;
  std::string msg;
  std::string structured_error_msg = std::string(specs::kNone);
  std::optional<std::string> ui_url;
  std::vector<specs::RoleStatus> roles_statuses;
  std::vector<specs::Role> roles;

  specs::AppStatus ToAppStatus() const;
};

struct ListAppResponse {
  std::string app_id;
  specs::AppState state = specs::AppState::kUnknown;
  std::string app_handle;
  std::string name;
};

enum class LogStream { kStdout, kStderr, kCombined };
std::optional<LogStream> ParseLogStream(std::string_view s);  // "stdout", "stderr", "combined"

struct LogOptions {
  std::string regex;                 // only lines matching it (std::regex, ECMAScript); empty: all
  bool tail = false;                 // follow the log until the app ends
  std::optional<LogStream> streams;  // the scheduler's default when unset
};

// What `trun stack` of an app shows: a document per node that answered
// (agent/stacks.h), and for each node that did not, why (naming it).
struct StacksAnswer {
  std::vector<nlohmann::json> nodes;
  std::vector<std::string> unanswered;
};

class Scheduler {
 public:
  Scheduler(std::string name, std::string session)
      : name_(std::move(name)), session_(std::move(session)) {}
  virtual ~Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const std::string& name() const { return name_; }
  const std::string& session() const { return session_; }
  std::string Handle(const std::string& app_id) const {
    return specs::AppHandle{name_, session_, app_id}.ToString();
  }

  virtual const specs::RunOpts& RunOpts() const = 0;

  // Validates `app` (every problem at once) and resolves `cfg` against the
  // run options, then builds the request. Nothing is started.
  Result<DryRunInfo> SubmitDryRun(const specs::AppDef& app, const specs::Cfg& cfg);

  // Submits the request `info` of this scheduler's SubmitDryRun; returns
  // the app id.
  virtual Result<std::string> Schedule(const DryRunInfo& info) = 0;

  // NotFound when the scheduler knows no such app.
  virtual Result<DescribeAppResponse> Describe(const std::string& app_id) = 0;

  // Calls `on_line` with each line (without its newline) of one replica's
  // log, in order; stops early when it returns false. With `tail`, waits
  // for more until the app is terminal.
  virtual Status Log(const std::string& app_id, const std::string& role, int replica_id,
                     const LogOptions& options,
                     const std::function<bool(std::string_view)>& on_line) = 0;

  // Stops the app; CANCELLED once it has stopped. A terminal app is left as
  // it is.
  virtual Status Cancel(const std::string& app_id) = 0;

  // TorchX's delete: stops the app if it runs, then removes what the
  // scheduler keeps of it, so that it is no longer known. This default only
  // cancels, as TorchX's does where the scheduler owns the record (SLURM's
  // accounting); a scheduler with records of its own overrides it.
  virtual Status Delete(const std::string& app_id) { return Cancel(app_id); }

  virtual Result<std::vector<ListAppResponse>> List() = 0;

  // Every worker's Python stacks of a running app, one document per node
  // (agent/stacks.h), and the nodes that gave none. Unsupported where the
  // scheduler cannot reach the app's processes from here.
  virtual Result<StacksAnswer> Stacks(const std::string& app_id);

 protected:
  virtual Result<DryRunInfo> DryRun(const specs::AppDef& app, const specs::Cfg& cfg) = 0;

 private:
  std::string name_;
  std::string session_;
};

// The session of handles trun makes ("local://trun/echo-bx2k..."): TorchX
// names its default session "torchx".
inline constexpr std::string_view kDefaultSession = "trun";

struct SchedulerInfo {
  const char* name;
  const char* help;
  // Null while the scheduler is not implemented.
  std::unique_ptr<Scheduler> (*create)(const std::string& session);
};

// Every scheduler, implemented or not, in the order `trun runopts` lists them.
const std::vector<SchedulerInfo>& Schedulers();

// InvalidArgument (with a suggestion) for an unknown name; Unsupported for
// a scheduler that is not available yet.
Result<std::unique_ptr<Scheduler>> CreateScheduler(const std::string& name,
                                                   const std::string& session);

// TorchX's random_id: 64 random bits written in the letters
// "bcdfghjklmnpqrstvwxz" (first) and those plus "012345679" (rest), a name
// that Kubernetes accepts.
std::string RandomId();

// $XDG_STATE_HOME/trun, else $HOME/.local/state/trun.
std::string StateRoot();

// The job token (store/auth.h) a submission gives its app's agents, so that
// no stranger can join the job's rendezvous: the submitter's TRUN_JOB_TOKEN
// when set, else a fresh one for this app. Every scheduler hands it to the
// agents as TRUN_JOB_TOKEN (local: in the environment of the replicas of a
// role that runs trun's agent; slurm: on those tasks' stdin; kubernetes:
// from a Secret), never on a command line, in a dry run or in the app's
// recorded request.
std::string JobTokenForSubmission();
inline constexpr const char* kJobTokenEnv = "TRUN_JOB_TOKEN";

}  // namespace trun::schedulers
