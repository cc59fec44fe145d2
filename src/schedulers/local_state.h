// What the local scheduler keeps on disk, so that any process can find an
// app again: `trun status` from another shell, a day later.
//
//   $XDG_STATE_HOME/trun/local/<app_id>/     (default ~/.local/state/trun)
//     app.json          the AppDef as submitted (`trun describe`)
//     request.json      the exact request: every replica's argv, added
//                       environment, directory and log files
//     state.json        the app's and each replica's state, written whole
//                       (tmp + rename) by the supervisor on every change
//     supervisor.log    the supervisor's own messages
//     <role>/<replica>/stdout.log, stderr.log, combined.log, error.json
//                       (elsewhere with the `log_dir` run option)
//
// The supervisor (local_supervisor.h) is the only writer of state.json
// while it lives; `trun cancel` writes it only when the supervisor is gone.
// A supervisor is recognized by its pid and start time, so a reused pid is
// not mistaken for it.
//
// Thread-safety: plain values and file I/O.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "specs/app.h"

namespace trun::schedulers::local {

// StateRoot()/local
std::string LocalRoot();
std::string AppDir(const std::string& app_id);

// The state and logs are the user's alone (issue 19): directories 0700 and
// files 0600, whatever the umask.
inline constexpr mode_t kPrivateDir = 0700;
inline constexpr mode_t kPrivateFile = 0600;
// Creates `path` and its missing parents, each new one 0700.
Status MakePrivateDirs(const std::string& path);
// PermissionDenied (exit 5) when the app's directory belongs to another
// user: `status`, `log`, `describe` and `cancel` refuse it. OK when it is
// ours or missing (the caller reports a missing one).
Status CheckOwner(const std::string& app_id);

struct ReplicaRequest {
  int id = 0;
  std::vector<std::string> argv;  // argv[0] resolved to a path
  // Set on top of the submitter's environment (which the supervisor
  // inherits): the role's env after macros, and the scheduler's variables.
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string log_dir;  // stdout.log, stderr.log, combined.log, error.json

  std::string ErrorFile() const { return log_dir + "/error.json"; }
};

struct RoleRequest {
  std::string name;
  int max_retries = 0;
  specs::RetryPolicy retry_policy = specs::RetryPolicy::kApplication;
  bool job_token = false;  // its replicas get TRUN_JOB_TOKEN (specs::RunsTrunsAgent)
  std::vector<ReplicaRequest> replicas;
};

struct Request {
  std::string app_id;
  std::string session;
  std::string app_dir;
  double stop_timeout_s = 10;  // SIGTERM to SIGKILL when replicas are stopped
  std::vector<RoleRequest> roles;
};

nlohmann::ordered_json ToJson(const Request& r);
Result<Request> RequestFromJson(const nlohmann::json& j);

struct ReplicaState {
  int id = 0;
  specs::AppState state = specs::AppState::kPending;
  pid_t pid = 0;                // also the replica's process group
  std::optional<int> exitcode;  // the exit code, or -signal
  std::string structured_error_msg = std::string(specs::kNone);
};

struct RoleState {
  std::string name;
  int restarts = 0;  // retries spent by this role
  std::vector<ReplicaState> replicas;
};

struct State {
  std::string app_id;
  std::string session;
  std::string name;  // the AppDef's
  specs::AppState state = specs::AppState::kSubmitted;
  int num_restarts = 0;
  std::string msg;
  std::string structured_error_msg = std::string(specs::kNone);
  pid_t supervisor_pid = 0;
  uint64_t supervisor_start = 0;  // /proc/<pid>/stat starttime
  double submitted_at = 0;        // seconds since the epoch
  double finished_at = 0;
  std::vector<RoleState> roles;
};

nlohmann::ordered_json ToJson(const State& s);
Result<State> StateFromJson(const nlohmann::json& j);
// The state of `req`'s app just submitted: SUBMITTED now, each replica
// PENDING; `name` is the AppDef's.
State SubmittedState(const Request& req, const std::string& name);

Result<State> ReadState(const std::string& app_dir);
Status WriteState(const std::string& app_dir, const State& s);

// The process's start time in clock ticks after boot; 0 when it is gone.
uint64_t ProcessStartTime(pid_t pid);
// Whether `pid` is still the process that started at `start_time`.
bool ProcessIs(pid_t pid, uint64_t start_time);

double Now();

}  // namespace trun::schedulers::local
