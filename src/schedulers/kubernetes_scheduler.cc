#include "schedulers/kubernetes_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <map>
#include <thread>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "failure/failure.h"
#include "schedulers/kubernetes_manifests.h"
#include "schedulers/log_files.h"
#include "specs/serialize.h"

namespace trun::schedulers {
namespace {

using kube::Workload;
using nlohmann::json;
using specs::AppState;

constexpr const char* kVolcanoJobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs";
constexpr const char* kJobSets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{}/jobsets";
constexpr const char* kJobs = "/apis/batch/v1/namespaces/{}/jobs";
constexpr const char* kServices = "/api/v1/namespaces/{}/services";
constexpr const char* kPods = "/api/v1/namespaces/{}/pods";
constexpr const char* kSecrets = "/api/v1/namespaces/{}/secrets";
// How long one watch of a replica's pods lasts (`log --tail`).
constexpr int kWatchSeconds = 5;

std::string Collection(const char* pattern, const std::string& ns) {
  return fmt::format(fmt::runtime(pattern), ns);
}

// The collection an object of ours is created in.
std::string CollectionOf(const json& obj, const std::string& ns) {
  const std::string kind = obj.value("kind", ""), api = obj.value("apiVersion", "");
  if (api == "batch.volcano.sh/v1alpha1") return Collection(kVolcanoJobs, ns);
  if (kind == "JobSet") return Collection(kJobSets, ns);
  if (kind == "Service") return Collection(kServices, ns);
  if (kind == "Secret") return Collection(kSecrets, ns);
  return Collection(kJobs, ns);
}

std::string Selector(const std::string& name) {
  return "labelSelector=" +
         kube::UrlEncode(fmt::format("{}={}", kube::kLabelInstance, kube::LabelValue(name)));
}

struct AppId {
  std::string ns, name;
};

Result<AppId> ParseAppId(const std::string& app_id) {
  size_t colon = app_id.find(':');
  if (colon == std::string::npos || !kube::IsDnsLabel(app_id.substr(0, colon)) ||
      colon + 1 == app_id.size()) {
    return Status::UnknownApp(fmt::format(
        "'{}' is not a kubernetes app id: expected NAMESPACE:NAME (kubernetes://trun/default:"
        "echo-bx2k...)",
        app_id));
  }
  return AppId{app_id.substr(0, colon), app_id.substr(colon + 1)};
}

std::string Str(const json& j, const json::json_pointer& p) {
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : "";
}

bool Condition(const json& obj, const char* type) {
  const json::json_pointer p("/status/conditions");
  if (!obj.contains(p) || !obj.at(p).is_array()) return false;
  for (const auto& c : obj.at(p)) {
    if (c.value("type", "") == type && c.value("status", "") == "True") return true;
  }
  return false;
}

std::string ConditionMessage(const json& obj, const char* type) {
  const json::json_pointer p("/status/conditions");
  if (!obj.contains(p) || !obj.at(p).is_array()) return "";
  for (const auto& c : obj.at(p)) {
    if (c.value("type", "") == type) return c.value("message", c.value("reason", ""));
  }
  return "";
}

long long Count(const json& obj, const char* pointer) {
  const json::json_pointer p(pointer);
  return obj.contains(p) && obj.at(p).is_number_integer() ? obj.at(p).get<long long>() : 0;
}

// TorchX's JOB_STATE: a Volcano Job's phase.
AppState VolcanoState(const std::string& phase) {
  static const std::map<std::string, AppState> kStates = {
      {"Pending", AppState::kPending},    {"Aborting", AppState::kRunning},
      {"Aborted", AppState::kCancelled},  {"Running", AppState::kRunning},
      {"Restarting", AppState::kRunning}, {"Completed", AppState::kSucceeded},
      {"Completing", AppState::kRunning}, {"Terminating", AppState::kRunning},
      {"Terminated", AppState::kFailed},  {"Failed", AppState::kFailed}};
  auto it = kStates.find(phase);
  return it == kStates.end() ? AppState::kUnknown : it->second;
}

AppState PodState(const std::string& phase) {
  if (phase == "Pending") return AppState::kPending;
  if (phase == "Running") return AppState::kRunning;
  if (phase == "Succeeded") return AppState::kSucceeded;
  if (phase == "Failed") return AppState::kFailed;
  return AppState::kUnknown;
}

// An app as the cluster has it: its top objects (the Volcano Job, the
// JobSet, or the Jobs).
struct Found {
  Workload workload = Workload::kVolcano;
  std::vector<json> objects;
};

// The state the objects give, and why; PENDING until something runs.
std::pair<AppState, std::string> ObjectState(const Found& f) {
  if (f.objects.empty()) return {AppState::kUnknown, ""};
  const json& top = f.objects.front();
  if (top.contains("metadata") && top["metadata"].contains("deletionTimestamp")) {
    return {AppState::kCancelled, "deleted (trun cancel)"};
  }
  if (f.workload == Workload::kVolcano) {
    const std::string phase = Str(top, json::json_pointer("/status/state/phase"));
    if (phase.empty()) return {AppState::kPending, "Volcano has not taken the job up yet"};
    std::string msg = Str(top, json::json_pointer("/status/state/message"));
    return {VolcanoState(phase), msg.empty() ? "Volcano job phase " + phase : msg};
  }
  if (f.workload == Workload::kJobSet) {
    if (Condition(top, "Failed")) return {AppState::kFailed, ConditionMessage(top, "Failed")};
    if (Condition(top, "Completed")) {
      return {AppState::kSucceeded, ConditionMessage(top, "Completed")};
    }
    if (Condition(top, "Suspended")) return {AppState::kPending, "suspended"};
    long long ready = 0;
    const json::json_pointer p("/status/replicatedJobsStatus");
    if (top.contains(p) && top.at(p).is_array()) {
      for (const auto& r : top.at(p)) ready += r.value("ready", 0LL) + r.value("active", 0LL);
    }
    return {ready > 0 ? AppState::kRunning : AppState::kPending, ""};
  }
  bool all_complete = true;
  long long active = 0;
  for (const auto& job : f.objects) {
    if (Condition(job, "Failed")) {
      return {AppState::kFailed,
              fmt::format("Job {}: {}", Str(job, json::json_pointer("/metadata/name")),
                          ConditionMessage(job, "Failed"))};
    }
    all_complete = all_complete && Condition(job, "Complete");
    active += Count(job, "/status/ready");
  }
  if (all_complete) return {AppState::kSucceeded, ""};
  return {active > 0 ? AppState::kRunning : AppState::kPending, ""};
}

int Restarts(const Found& f) {
  if (f.objects.empty()) return 0;
  if (f.workload == Workload::kVolcano) {
    return static_cast<int>(Count(f.objects.front(), "/status/retryCount"));
  }
  if (f.workload == Workload::kJobSet) {
    return static_cast<int>(Count(f.objects.front(), "/status/restarts"));
  }
  long long failed = 0;
  for (const auto& job : f.objects) failed += Count(job, "/status/failed");
  return static_cast<int>(failed);
}

std::optional<specs::AppDef> AppDefOf(const json& obj) {
  const std::string text = Str(
      obj, json::json_pointer("/metadata/annotations/" + std::string("trun.pytorch.org~1app-def")));
  if (text.empty()) return std::nullopt;
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  auto app = specs::AppDefFromJson(j);
  if (!app.ok()) return std::nullopt;
  return *app;
}

// The replica a pod is: its role's index and its own.
std::optional<std::pair<int, int>> ReplicaOf(const json& pod) {
  const json& labels = pod["metadata"].value("labels", json::object());
  auto role = ParseInt(labels.value(std::string(kube::kLabelRoleIndex), ""));
  auto id = ParseInt(labels.value(std::string(kube::kLabelReplicaId), ""));
  if (!id) id = ParseInt(labels.value(std::string(kube::kLabelCompletionIndex), ""));
  if (!role || !id) return std::nullopt;
  return std::make_pair(static_cast<int>(*role), static_cast<int>(*id));
}

// The newest pod of each replica, and how many pods there were.
std::map<std::pair<int, int>, json> Newest(const json& pods) {
  std::map<std::pair<int, int>, json> out;
  for (const auto& pod : pods.value("items", json::array())) {
    auto r = ReplicaOf(pod);
    if (!r) continue;
    auto it = out.find(*r);
    const json::json_pointer created("/metadata/creationTimestamp");
    if (it == out.end() || Str(pod, created) > Str(it->second, created)) out[*r] = pod;
  }
  return out;
}

// An RFC 3339 time as the API server writes it ("2026-11-25T12:00:00Z"), in
// seconds since the epoch; 0 when it is not one.
int64_t EpochSeconds(const std::string& rfc3339) {
  return kube::Rfc3339Seconds(rfc3339).value_or(0);
}

// The main container's end: its termination message (trun's root cause)
// or its reason and exit code; and when it ended.
std::pair<std::string, std::string> Termination(const json& pod) {
  const json::json_pointer p("/status/containerStatuses");
  if (!pod.contains(p) || !pod.at(p).is_array()) return {};
  const std::string main = Str(pod, json::json_pointer("/spec/containers/0/name"));
  for (const auto& cs : pod.at(p)) {
    if (cs.value("name", "") != main) continue;
    const json::json_pointer t("/state/terminated");
    if (!cs.contains(t)) return {};
    const json& term = cs.at(t);
    std::string msg = std::string(Trim(term.value("message", "")));
    if (msg.empty()) {
      msg = fmt::format("container {} exited with code {} ({})", main, term.value("exitCode", -1),
                        term.value("reason", "Error"));
    }
    return {msg, term.value("finishedAt", "")};
  }
  return {};
}

Status NoApp(const AppId& id) {
  return Status::UnknownApp(fmt::format(
      "kubernetes app {}:{}: the namespace {} has no Volcano Job, JobSet or Jobs of that name "
      "(a cancelled JobSet or Job app is deleted)",
      id.ns, id.name, id.ns));
}

// An app's own object that answers 404 after Find found it was deleted
// meanwhile (a JobSet being cancelled): to the caller, no such app.
Status AppGone(Status s) {
  return s.code() == StatusCode::kNotFound ? Status::UnknownApp(s.message()) : s;
}

// The app's top objects, whichever workload it is.
Result<Found> Find(const kube::KubeApi& c, const AppId& id) {
  auto vc = c.Call("GET", Collection(kVolcanoJobs, id.ns) + "/" + id.name);
  if (vc.ok()) return Found{Workload::kVolcano, {*vc}};
  if (vc.status().code() != StatusCode::kNotFound) return vc.status();
  auto js = c.Call("GET", Collection(kJobSets, id.ns) + "/" + id.name);
  if (js.ok()) return Found{Workload::kJobSet, {*js}};
  if (js.status().code() != StatusCode::kNotFound) return js.status();
  auto jobs = c.Call("GET", Collection(kJobs, id.ns) + "?" + Selector(id.name));
  if (!jobs.ok() && jobs.status().code() == StatusCode::kNotFound) return NoApp(id);
  if (!jobs.ok()) return jobs.status();
  Found f{Workload::kJob, {}};
  for (const auto& j : jobs->value("items", json::array())) f.objects.push_back(j);
  if (f.objects.empty()) return NoApp(id);
  std::sort(f.objects.begin(), f.objects.end(), [](const json& a, const json& b) {
    return Str(a, json::json_pointer("/metadata/name")) <
           Str(b, json::json_pointer("/metadata/name"));
  });
  return f;
}

// Why a create failed, in the user's terms.
Status CreateError(const Status& s, const json& obj, const std::string& ns) {
  const std::string kind = obj.value("kind", ""), api = obj.value("apiVersion", "");
  if (s.code() == StatusCode::kNotFound) {
    if (api == "batch.volcano.sh/v1alpha1" || kind == "JobSet") {
      return Status::InvalidArgument(fmt::format(
          "the cluster has no {} ({}): install {}, or run with -cfg workload=job, which needs no "
          "add-on ({})",
          kind, api, kind == "JobSet" ? "JobSet" : "Volcano", s.message()));
    }
    return Status::InvalidArgument(
        fmt::format("the namespace '{}' does not exist ({})", ns, s.message()));
  }
  return s;
}

// An app the cluster has: its client, id and top objects.
struct OpenedApp {
  const kube::KubeApi* client = nullptr;
  AppId id;
  Found found;
};

// The id is checked before the client is made: a malformed id needs no
// kubeconfig to be refused.
Result<OpenedApp> OpenApp(const std::string& app_id,
                          const std::function<Result<const kube::KubeApi*>()>& client) {
  auto id = ParseAppId(app_id);
  if (!id.ok()) return id.status();
  auto c = client();
  if (!c.ok()) return c.status();
  auto found = Find(**c, *id);
  if (!found.ok()) return found.status();
  return OpenedApp{*c, *id, std::move(*found)};
}

// Deletes the app's objects with their pods (propagationPolicy Foreground):
// the Volcano Job (TorchX's delete), the JobSet, or the Jobs and their
// Service; then the job token's Secret, which the garbage collector would
// take with its owner, at once (and also when making it a dependent was
// refused). An object already gone is no error, the app's first one is.
Status DeleteObjects(const kube::KubeApi& c, const AppId& id, const Found& found) {
  const std::string options =
      R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"})";
  auto del = [&](const std::string& path) {
    auto r = c.Call("DELETE", path, options);
    return r.ok() || r.status().code() == StatusCode::kNotFound ? Status::OK() : r.status();
  };
  if (found.workload == Workload::kVolcano || found.workload == Workload::kJobSet) {
    const char* kind = found.workload == Workload::kVolcano ? kVolcanoJobs : kJobSets;
    Status s = AppGone(c.Call("DELETE", Collection(kind, id.ns) + "/" + id.name, options).status());
    if (!s.ok()) return s;
  } else {
    for (const auto& job : found.objects) {
      Status s =
          del(Collection(kJobs, id.ns) + "/" + Str(job, json::json_pointer("/metadata/name")));
      if (!s.ok()) return s;
    }
    Status s = del(Collection(kServices, id.ns) + "/" + id.name);
    if (!s.ok()) return s;
  }
  return del(Collection(kSecrets, id.ns) + "/" + id.name);
}

// Makes the job token's Secret NS/NAME a dependent of `owner` (apiVersion,
// kind, metadata.name and .uid of an object just created), so that
// Kubernetes' garbage collector deletes it with the app. A failure leaves
// the app running and the Secret behind: a warning.
void OwnSecret(const kube::KubeApi& c, const std::string& ns, const std::string& name,
               const json& owner) {
  const std::string kind = Str(owner, json::json_pointer("/kind")),
                    api = Str(owner, json::json_pointer("/apiVersion")),
                    owner_name = Str(owner, json::json_pointer("/metadata/name")),
                    uid = Str(owner, json::json_pointer("/metadata/uid"));
  Status s = Status::OK();
  if (uid.empty()) {
    s = Status::Unavailable("the server's answer to its creation has no uid");
  } else {
    const json ref = {{"apiVersion", api}, {"kind", kind}, {"name", owner_name}, {"uid", uid}};
    const json patch = {{"metadata", {{"ownerReferences", json::array({ref})}}}};
    s = c.Call("PATCH", Collection(kSecrets, ns) + "/" + name, patch.dump(),
               "application/merge-patch+json")
            .status();
  }
  if (!s.ok()) {
    log::Warning(
        "kubernetes: the Secret {} (the job token) could not be made a part of {} {}, so it "
        "stays when the app is deleted (kubectl -n {} delete secret {}): {}",
        name, kind, owner_name, ns, name, s.message());
  }
}

}  // namespace

KubernetesScheduler::KubernetesScheduler(std::string session, std::shared_ptr<kube::KubeApi> api)
    : Scheduler("kubernetes", std::move(session)),
      opts_(kube::KubernetesRunOpts()),
      client_(std::move(api)) {}

Result<const kube::KubeApi*> KubernetesScheduler::Client() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!client_) {
    const char* home = std::getenv("HOME");
    auto config = kube::LoadKubeConfig(home ? home : "");
    if (!config.ok()) return config.status();
    client_ = std::make_shared<kube::KubeClient>(std::move(*config));
  }
  return client_.get();
}

Result<DryRunInfo> KubernetesScheduler::DryRun(const specs::AppDef& app, const specs::Cfg& cfg) {
  auto req = kube::MakeRequest(app, cfg, RandomId(), SelfExecutable());
  if (!req.ok()) return req.status();
  DryRunInfo info;
  info.text = kube::FormatRequest(*req);
  info.request = std::move(*req);
  return info;
}

Result<std::string> KubernetesScheduler::Schedule(const DryRunInfo& info) {
  const auto* made = std::get_if<kube::Request>(&info.request);
  if (made == nullptr) {
    return Status::Internal("the kubernetes scheduler was given another's request");
  }
  // A copy: the job token goes in below, and auto mode may make it again.
  kube::Request req = *made;
  auto c = Client();
  if (!c.ok()) return c.status();
  if (req.auto_workload) {
    // API discovery: the group version answers 404 where JobSet's CRD is
    // not installed. Then the same app, with the same name, as Jobs.
    auto group = (*c)->Call("GET", "/apis/jobset.x-k8s.io/v1alpha2");
    if (!group.ok() && group.status().code() != StatusCode::kNotFound) return group.status();
    if (!group.ok()) {
      specs::Cfg cfg = info.cfg;
      cfg["workload"] = std::string("job");
      auto jobs = kube::MakeRequest(info.app, cfg, req.unique, SelfExecutable());
      if (!jobs.ok()) return jobs.status();
      req = std::move(*jobs);
    }
  }
  // The job token of this app's agents; the dry run's was only a stand-in.
  kube::SetJobToken(req, JobTokenForSubmission());
  // The server checks every object before any is created (as TorchX's
  // validate_spec), so a refused Job leaves no Service behind.
  if (req.validate_spec) {
    for (const auto& obj : req.objects) {
      auto r = (*c)->Call("POST", CollectionOf(obj, req.ns) + "?dryRun=All", obj.dump());
      if (!r.ok()) return CreateError(r.status(), obj, req.ns);
    }
  }
  std::vector<std::string> created;
  bool secret = false;  // the job token's Secret was created
  json owner;           // the first other object created
  for (const auto& obj : req.objects) {
    const std::string collection = CollectionOf(obj, req.ns);
    auto r = (*c)->Call("POST", collection, obj.dump());
    if (!r.ok()) {
      // Undo what was created, so that nothing half made keeps running.
      for (const auto& path : created) (void)(*c)->Call("DELETE", path);
      if (r.status().http_status() == 409) {
        return Status::InvalidArgument(fmt::format(
            "{} {} already exists; this is a transient clash of random names, submit again",
            obj.value("kind", ""), req.name));
      }
      return CreateError(r.status(), obj, req.ns);
    }
    created.push_back(collection + "/" + obj["metadata"].value("name", ""));
    if (obj.value("kind", "") == "Secret") {
      secret = true;
    } else if (owner.is_null()) {
      // What the request named, with the uid the server gave it.
      owner = {{"apiVersion", obj.value("apiVersion", "")},
               {"kind", obj.value("kind", "")},
               {"metadata",
                {{"name", obj["metadata"].value("name", "")},
                 {"uid", Str(*r, json::json_pointer("/metadata/uid"))}}}};
    }
  }
  if (secret && !owner.is_null()) OwnSecret(**c, req.ns, req.name, owner);
  return req.AppId();
}

Result<DescribeAppResponse> KubernetesScheduler::Describe(const std::string& app_id) {
  auto opened = OpenApp(app_id, [this] { return Client(); });
  if (!opened.ok()) return opened.status();
  const kube::KubeApi* c = opened->client;
  const AppId& id = opened->id;
  const Found& found = opened->found;
  auto pods = c->Call("GET", Collection(kPods, id.ns) + "?" + Selector(id.name));
  if (!pods.ok()) return pods.status();

  DescribeAppResponse d;
  d.app_id = app_id;
  auto [state, msg] = ObjectState(found);
  d.state = state;
  d.msg = msg;
  d.num_restarts = Restarts(found);
  auto app = AppDefOf(found.objects.front());
  d.name = app ? app->name : id.name;
  if (app) d.roles = app->roles;
  auto newest = Newest(*pods);
  // The roles: the AppDef's, else those the pods name.
  std::vector<std::pair<std::string, int>> roles;
  if (app) {
    for (const auto& r : app->roles) roles.emplace_back(r.name, r.num_replicas);
  } else {
    for (const auto& [key, pod] : newest) {
      const std::string name =
          pod["metadata"]["labels"].value(std::string(kube::kLabelRoleName), "");
      if (static_cast<int>(roles.size()) <= key.first) roles.resize(key.first + 1);
      roles[key.first].first = name;
      roles[key.first].second = std::max(roles[key.first].second, key.second + 1);
    }
  }
  bool running = false;
  // The failed pods, for the root cause (failure::RootCause's rule).
  std::vector<failure::FailureKey> keys;
  std::vector<std::string> whys;
  for (size_t ri = 0; ri < roles.size(); ++ri) {
    specs::RoleStatus rs;
    rs.role = roles[ri].first;
    for (int k = 0; k < roles[ri].second; ++k) {
      specs::ReplicaStatus r;
      r.id = k;
      r.role = rs.role;
      r.state = AppState::kPending;
      auto it = newest.find({static_cast<int>(ri), k});
      if (it != newest.end()) {
        const json& pod = it->second;
        r.state = PodState(Str(pod, json::json_pointer("/status/phase")));
        const std::string host = Str(pod, json::json_pointer("/spec/hostname")),
                          sub = Str(pod, json::json_pointer("/spec/subdomain"));
        r.hostname = !host.empty() && !sub.empty() ? host + "." + sub
                                                   : Str(pod, json::json_pointer("/status/podIP"));
        r.hostaddr = r.hostname;
        running = running || r.state == AppState::kRunning;
        if (r.state == AppState::kFailed) {
          auto [why, at] = Termination(pod);
          r.structured_error_msg = why.empty() ? std::string(specs::kNone) : why;
          if (!why.empty()) {
            // Dated by trun's error file when the message is one, else by
            // when the container ended.
            auto file = failure::ParseErrorFile(why, "termination message");
            keys.push_back(
                {.timestamp = file.ok() && file->timestamp ? *file->timestamp : EpochSeconds(at),
                 .has_error_file = file.ok(),
                 .rank = static_cast<int>(keys.size())});
            whys.push_back(why);
          }
        }
      }
      if (d.state == AppState::kCancelled && !specs::IsTerminal(r.state)) {
        r.state = AppState::kCancelled;
      }
      rs.replicas.push_back(r);
    }
    d.roles_statuses.push_back(rs);
  }
  if (d.state == AppState::kPending && running) d.state = AppState::kRunning;
  if (!keys.empty()) d.structured_error_msg = whys[failure::RootCause(keys)];
  if (d.state != AppState::kFailed) d.structured_error_msg = std::string(specs::kNone);
  return d;
}

Status KubernetesScheduler::Log(const std::string& app_id, const std::string& role, int replica_id,
                                const LogOptions& options,
                                const std::function<bool(std::string_view)>& on_line) {
  if (options.streams && *options.streams != LogStream::kCombined) {
    return Status::InvalidArgument(
        "log: Kubernetes keeps one log per container, stdout and stderr together: use "
        "--streams combined (the default)");
  }
  bool stopped = false;
  auto filtered = FilterLines(options, [&](std::string_view line) {
    stopped = !on_line(line);
    return !stopped;
  });
  if (!filtered.ok()) return filtered.status();
  auto id = ParseAppId(app_id);
  if (!id.ok()) return id.status();
  auto c = Client();
  if (!c.ok()) return c.status();
  auto d = Describe(app_id);
  if (!d.ok()) return d.status();
  int role_index = -1;
  for (size_t i = 0; i < d->roles_statuses.size(); ++i) {
    if (d->roles_statuses[i].role == role) role_index = static_cast<int>(i);
  }
  if (role_index < 0) {
    return Status::InvalidArgument(fmt::format("log: app {} has no role '{}'", app_id, role));
  }
  std::string done_pod;
  while (true) {
    auto pods = (*c)->Call("GET", Collection(kPods, id->ns) + "?" + Selector(id->name));
    if (!pods.ok()) return pods.status();
    auto newest = Newest(*pods);
    auto it = newest.find({role_index, replica_id});
    std::string pod_name, container;
    std::string phase;
    if (it != newest.end()) {
      pod_name = Str(it->second, json::json_pointer("/metadata/name"));
      container = Str(it->second, json::json_pointer("/spec/containers/0/name"));
      phase = Str(it->second, json::json_pointer("/status/phase"));
    }
    const bool started = !pod_name.empty() && phase != "Pending";
    if (started && pod_name != done_pod) {
      std::string path = fmt::format("{}/{}/log?container={}", Collection(kPods, id->ns), pod_name,
                                     kube::UrlEncode(container));
      if (options.tail) path += "&follow=true";
      Status s = (*c)->Stream(path, *filtered);
      if (!s.ok()) return AppGone(s);
      if (stopped || !options.tail) return Status::OK();
      done_pod = pod_name;
    } else if (!options.tail) {
      return Status::OK();  // no pod has started yet: nothing was written
    }
    // Following: a retry may start a new pod for this replica.
    auto now = Describe(app_id);
    if (!now.ok()) return now.status();
    if (specs::IsTerminal(now->state) && (pod_name.empty() || pod_name == done_pod)) {
      return Status::OK();
    }
    // Wait for a change to this replica's pods: a watch from the list's
    // version, a few seconds at a time so that the app's end is noticed
    // (it is not a pod event); a plain pause where the watch fails.
    const std::string version = Str(*pods, json::json_pointer("/metadata/resourceVersion"));
    Status watched = Status::Unsupported("no resourceVersion to watch from");
    if (!version.empty()) {
      watched = (*c)->Stream(fmt::format("{}?{}&watch=true&resourceVersion={}&timeoutSeconds={}",
                                         Collection(kPods, id->ns), Selector(id->name),
                                         kube::UrlEncode(version), kWatchSeconds),
                             [&](std::string_view line) {
                               auto event = json::parse(line, nullptr, false);
                               if (event.is_discarded() || !event.contains("object")) return true;
                               auto r = ReplicaOf(event["object"]);
                               return !(r && *r == std::make_pair(role_index, replica_id));
                             });
    }
    if (!watched.ok()) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

Status KubernetesScheduler::Cancel(const std::string& app_id) {
  auto opened = OpenApp(app_id, [this] { return Client(); });
  if (!opened.ok()) return opened.status();
  const kube::KubeApi* c = opened->client;
  const AppId& id = opened->id;
  const Found& found = opened->found;
  if (specs::IsTerminal(ObjectState(found).first)) return Status::OK();
  if (found.workload == Workload::kVolcano) {
    // TorchX's cancel: the job is aborted and kept, for inspection.
    auto r = c->Call("PATCH", Collection(kVolcanoJobs, id.ns) + "/" + id.name + "/status",
                     R"({"status":{"state":{"phase":"Aborted"}}})", "application/merge-patch+json");
    return AppGone(r.status());
  }
  return DeleteObjects(*c, id, found);
}

Status KubernetesScheduler::Delete(const std::string& app_id) {
  auto opened = OpenApp(app_id, [this] { return Client(); });
  if (!opened.ok()) return opened.status();
  // Whatever its state: a finished app's objects stay until deleted.
  return DeleteObjects(*opened->client, opened->id, opened->found);
}

Result<std::vector<ListAppResponse>> KubernetesScheduler::List() {
  auto c = Client();
  if (!c.ok()) return c.status();
  const std::string ns = (*c)->Namespace();
  std::vector<std::pair<std::string, ListAppResponse>> apps;  // created, app
  auto add = [&](const json& obj, const Found& f) {
    ListAppResponse a;
    const std::string name = Str(
        obj, json::json_pointer("/metadata/labels/" + std::string("app.kubernetes.io~1instance")));
    a.app_id = fmt::format("{}:{}", ns,
                           name.empty() ? Str(obj, json::json_pointer("/metadata/name")) : name);
    a.app_handle = Handle(a.app_id);
    a.state = ObjectState(f).first;
    auto app = AppDefOf(obj);
    a.name = app ? app->name
                 : Str(obj, json::json_pointer("/metadata/labels/torchx.pytorch.org~1app-name"));
    apps.emplace_back(Str(obj, json::json_pointer("/metadata/creationTimestamp")), a);
  };
  // A cluster without Volcano or JobSet answers 404 for their collections.
  auto vc = (*c)->Call("GET", Collection(kVolcanoJobs, ns));
  if (!vc.ok() && vc.status().code() != StatusCode::kNotFound) return vc.status();
  if (vc.ok()) {
    for (const auto& j : vc->value("items", json::array())) add(j, Found{Workload::kVolcano, {j}});
  }
  const std::string ours =
      "labelSelector=" +
      kube::UrlEncode(fmt::format("{}={}", kube::kLabelManagedBy, kube::kManagedBy));
  auto js = (*c)->Call("GET", Collection(kJobSets, ns) + "?" + ours);
  if (!js.ok() && js.status().code() != StatusCode::kNotFound) return js.status();
  if (js.ok()) {
    for (const auto& j : js->value("items", json::array())) add(j, Found{Workload::kJobSet, {j}});
  }
  auto jobs = (*c)->Call("GET", Collection(kJobs, ns) + "?labelSelector=" +
                                    kube::UrlEncode(fmt::format("{}=job", kube::kLabelWorkload)));
  if (!jobs.ok()) return jobs.status();
  std::map<std::string, Found> by_app;
  for (const auto& j : jobs->value("items", json::array())) {
    auto& f = by_app[Str(j, json::json_pointer("/metadata/labels/app.kubernetes.io~1instance"))];
    f.workload = Workload::kJob;
    f.objects.push_back(j);
  }
  for (const auto& [name, f] : by_app) add(f.objects.front(), f);
  std::stable_sort(apps.begin(), apps.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ListAppResponse> out;
  for (auto& [created, a] : apps) out.push_back(std::move(a));
  return out;
}

}  // namespace trun::schedulers
