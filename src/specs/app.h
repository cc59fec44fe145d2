// The job spec, as TorchX defines it: an AppDef of Roles, each with a
// Resource, mounts and a retry policy; the states an app and its replicas go
// through; and the handle that names a submitted app
// (`SCHEDULER://SESSION/APP_ID`).
//
// Field names, defaults and sentinels ("<MISSING>", "<NONE>", the NULL
// resource of -1s) are TorchX's (torchx/specs/api.py), so a spec written for
// TorchX reads the same here. Role.overrides (deprecated in TorchX, lazy
// Python callables) has no counterpart. Serialization is in serialize.h.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::specs {

// A string attribute nobody set (TorchX's MISSING), e.g. a role's entrypoint.
inline constexpr std::string_view kMissing = "<MISSING>";
// An optional string attribute that is unset (TorchX's NONE).
inline constexpr std::string_view kNone = "<NONE>";

struct Resource {
  int cpu = -1;
  int gpu = -1;
  int mem_mb = -1;  // "memMB" in every serialized form
  // Scheduler-interpreted hardware specs, e.g.
  // {"node.kubernetes.io/instance-type": "p4d.24xlarge"}.
  nlohmann::json capabilities = nlohmann::json::object();
  // Named devices and their counts, e.g. {"vpc.amazonaws.com/efa": 4}.
  std::map<std::string, int> devices;
  // Metadata that no scheduler interprets.
  nlohmann::json tags = nlohmann::json::object();

  // TorchX's NULL_RESOURCE: "resources do not matter" (cpu=gpu=memMB=-1).
  bool IsNull() const { return cpu == -1 && gpu == -1 && mem_mb == -1; }
  bool operator==(const Resource&) const = default;
};

// What a failure of one replica restarts: itself (REPLICA), every replica of
// its role (ROLE) or the whole app (APPLICATION, the default).
enum class RetryPolicy { kReplica, kApplication, kRole };
std::string_view RetryPolicyName(RetryPolicy p);  // "REPLICA", ...
std::optional<RetryPolicy> ParseRetryPolicy(std::string_view name);

enum class MountType { kBind, kVolume, kDevice };
std::string_view MountTypeName(MountType t);  // "bind", "volume", "device"

// TorchX's BindMount(src_path, dst_path, read_only), VolumeMount(src,
// dst_path, read_only) and DeviceMount(src_path, dst_path, permissions) in
// one struct: `src` is src_path or the volume's name.
struct Mount {
  MountType type = MountType::kBind;
  std::string src;
  std::string dst;
  bool read_only = false;           // bind and volume
  std::string permissions = "rwm";  // device: letters of "rwm"
  bool operator==(const Mount&) const = default;
};

// Local project directories mirrored into the job: {local path: remote subdir}.
struct Workspace {
  std::map<std::string, std::string> projects;
  bool operator==(const Workspace&) const = default;
};

struct Role {
  std::string name;
  std::string image;
  std::optional<int> min_replicas;
  std::string entrypoint = std::string(kMissing);
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  int num_replicas = 1;
  int max_retries = 0;
  RetryPolicy retry_policy = RetryPolicy::kApplication;
  Resource resource;
  std::map<std::string, int> port_map;
  // Scheduler-specific data, any JSON; keys should be "$scheduler.$key".
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<Mount> mounts;
  std::optional<Workspace> workspace;
  bool operator==(const Role&) const = default;
};

// A role whose replicas run trun's agent (the dist.* builtins set it):
// role metadata {"trun.job_token": true}. Only such a role's replicas get
// the job token (docs/cli.md, "The job token"); another role's program has
// no use for it, and a secret given to it could leak from there.
inline constexpr const char* kJobTokenRoleKey = "trun.job_token";
bool RunsTrunsAgent(const Role& role);

struct AppDef {
  std::string name;
  std::vector<Role> roles;
  std::map<std::string, std::string> metadata;
  bool operator==(const AppDef&) const = default;
};

// Every problem of an AppDef at once, one per line: missing names and
// entrypoints, duplicate roles, replica counts, retries, ports, resources,
// mounts, environment names. Scheduler-specific limits are the scheduler's.
Status Validate(const AppDef& app);

// TorchX's AppState, with its numbers.
enum class AppState {
  kUnsubmitted = 0,
  kSubmitted = 1,
  kPending = 2,
  kRunning = 3,
  kSucceeded = 4,
  kFailed = 5,
  kCancelled = 6,
  kUnknown = 7,
};
std::string_view AppStateName(AppState s);  // "RUNNING", ...
std::optional<AppState> ParseAppState(std::string_view name);
// SUCCEEDED, FAILED, CANCELLED.
bool IsTerminal(AppState s);
// Terminal or RUNNING.
bool IsStarted(AppState s);

struct ReplicaStatus {
  int id = 0;
  AppState state = AppState::kUnknown;
  std::string role;
  std::string hostname;
  std::string structured_error_msg = std::string(kNone);
  std::string hostaddr;  // defaults to hostname
};

struct RoleStatus {
  std::string role;
  std::vector<ReplicaStatus> replicas;
};

struct AppStatus {
  AppState state = AppState::kUnknown;
  int num_restarts = 0;
  std::string msg;
  std::string structured_error_msg = std::string(kNone);
  std::optional<std::string> ui_url;
  std::vector<RoleStatus> roles;

  // TorchX's AppStatus.to_json(): state, num_restarts, roles, msg,
  // structured_error_msg, url. `roles` filters (empty: all).
  nlohmann::ordered_json ToJson(const std::vector<std::string>& roles = {}) const;
  // TorchX's AppStatus.format(): the "AppStatus:" block with one line per
  // replica; a replica's torch error file is shown as its message, exit
  // code, time and host.
  std::string Format(const std::vector<std::string>& roles = {}) const;
};

// `SCHEDULER://SESSION/APP_ID`; the session may be empty.
struct AppHandle {
  std::string scheduler;
  std::string session;
  std::string app_id;
  std::string ToString() const { return scheduler + "://" + session + "/" + app_id; }
};
Result<AppHandle> ParseAppHandle(std::string_view handle);

}  // namespace trun::specs
