#include "schedulers/kubernetes_manifests.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "common/files.h"
#include "common/problems.h"
#include "schedulers/scheduler.h"
#include "specs/macros.h"
#include "specs/named_resources.h"
#include "specs/serialize.h"
#include "store/auth.h"

namespace trun::schedulers::kube {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kMaxName = 63;
// RandomId() writes 64 bits in at most this many letters; names are checked
// at their longest, so whether an app fits does not depend on chance.
constexpr size_t kMaxUnique = 14;
// TorchX's: a role's env value starting with it is a field of the pod.
constexpr std::string_view kFieldPath = "[FIELD_PATH]";
constexpr std::string_view kRank0Var = "TORCHX_RANK0_HOST";
constexpr std::string_view kReplicaVar = "TRUN_REPLICA_ID";
constexpr std::string_view kInstanceTypeLabel = "node.kubernetes.io/instance-type";
constexpr int kMasterPort = 29500;
// How long a pod waits for the first replica's name to resolve (jobset and
// job: the record appears once that pod has an address).
constexpr int kDnsWaitSeconds = 600;

// The resolved run options.
struct Options {
  std::string ns = "default";
  Workload workload = Workload::kVolcano;
  std::string queue, service_account, priority_class, kueue_queue, trun_image, trun_path;
  long long reserved_millicpu = kReservedMilliCpu, reserved_memmb = kReservedMemMb;
  std::optional<long long> efa_device_count;
  std::map<std::string, std::string> node_selector;
  std::vector<std::string> tolerations;
  bool validate_spec = true;
  bool auto_workload = false;
};

template <typename T>
const T* Get(const specs::Cfg& cfg, const char* key) {
  auto it = cfg.find(key);
  return it == cfg.end() ? nullptr : std::get_if<T>(&it->second);
}

Options ReadOptions(const specs::Cfg& cfg, Problems& p) {
  Options o;
  auto str = [&](const char* key, std::string& out) {
    if (const auto* v = Get<std::string>(cfg, key)) out = *v;
  };
  str("namespace", o.ns);
  str("queue", o.queue);
  str("service_account", o.service_account);
  str("priority_class", o.priority_class);
  str("kueue_queue", o.kueue_queue);
  str("trun_image", o.trun_image);
  str("trun_path", o.trun_path);
  std::string workload = "volcano";
  str("workload", workload);
  if (workload == "volcano") {
    o.workload = Workload::kVolcano;
  } else if (workload == "jobset") {
    o.workload = Workload::kJobSet;
  } else if (workload == "job") {
    o.workload = Workload::kJob;
  } else if (workload == "auto") {
    o.workload = Workload::kJobSet;
    o.auto_workload = true;
  } else {
    p.Add(fmt::format("-cfg workload={}: expected volcano, jobset, job or auto", workload));
  }
  if (const auto* v = Get<long long>(cfg, "reserved_millicpu")) o.reserved_millicpu = *v;
  if (const auto* v = Get<long long>(cfg, "reserved_memmb")) o.reserved_memmb = *v;
  if (const auto* v = Get<long long>(cfg, "efa_device_count")) o.efa_device_count = *v;
  if (const auto* v = Get<bool>(cfg, "validate_spec")) o.validate_spec = *v;
  if (const auto* v = Get<std::map<std::string, std::string>>(cfg, "node_selector")) {
    o.node_selector = *v;
  }
  if (const auto* v = Get<std::vector<std::string>>(cfg, "tolerations")) o.tolerations = *v;
  if (o.trun_path.empty()) {
    o.trun_path = o.trun_image.empty() ? "trun" : std::string(kTrunBinDir) + "/trun";
  }

  if (!IsDnsLabel(o.ns)) {
    p.Add(fmt::format(
        "-cfg namespace={}: a namespace is a DNS label: at most 63 of a-z, 0-9 and '-', "
        "starting and ending with a letter or digit",
        o.ns));
  }
  if (o.workload == Workload::kVolcano && o.queue.empty()) {
    p.Add(
        "-cfg queue: the volcano workload needs a Volcano queue (Volcano's installation creates "
        "one named 'default'); or choose -cfg workload=jobset or workload=job, which need no "
        "Volcano");
  }
  if (o.reserved_millicpu < 0) p.Add("-cfg reserved_millicpu: expected 0 or more");
  if (o.reserved_memmb < 0) p.Add("-cfg reserved_memmb: expected 0 or more");
  if (o.efa_device_count && *o.efa_device_count < 0) {
    p.Add("-cfg efa_device_count: expected 0 or more");
  }
  return o;
}

bool Alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// "key[=value][:Effect]", kubectl taint's syntax, as a toleration.
Result<ordered_json> Toleration(const std::string& text) {
  ordered_json t;
  std::string rest = text, effect;
  if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    effect = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  size_t eq = rest.find('=');
  std::string key = rest.substr(0, eq);
  if (key.empty()) {
    return Status::InvalidArgument(
        fmt::format("-cfg tolerations: '{}' names no key; expected KEY[=VALUE][:EFFECT]", text));
  }
  t["key"] = key;
  if (eq == std::string::npos) {
    t["operator"] = "Exists";
  } else {
    t["operator"] = "Equal";
    t["value"] = rest.substr(eq + 1);
  }
  if (!effect.empty()) {
    if (effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
      return Status::InvalidArgument(
          fmt::format("-cfg tolerations: '{}': the effect is NoSchedule, PreferNoSchedule or "
                      "NoExecute, not '{}'",
                      text, effect));
    }
    t["effect"] = effect;
  }
  return t;
}

// A container port's name: an IANA service name (at most 15 of a-z, 0-9
// and '-', a letter among them).
bool IsPortName(const std::string& s) {
  return !s.empty() && s.size() <= 15 && IsDnsLabel(s) && s.find("--") == std::string::npos &&
         std::any_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// Why `role` cannot fit on the node type its resource asks for (the
// capability node.kubernetes.io/instance-type, when trun knows the type as
// the named resource aws_TYPE); empty when it fits or trun cannot tell.
std::string Fits(const specs::Role& role) {
  const auto& r = role.resource;
  auto it = r.capabilities.find(std::string(kInstanceTypeLabel));
  if (it == r.capabilities.end() || !it->is_string()) return "";
  const std::string type = it->get<std::string>();
  auto node = specs::NamedResource("aws_" + type);
  if (!node.ok()) return "";
  std::vector<std::string> over;
  if (r.cpu > node->cpu) over.push_back(fmt::format("cpu={} (it has {})", r.cpu, node->cpu));
  if (r.gpu > node->gpu) over.push_back(fmt::format("gpu={} (it has {})", r.gpu, node->gpu));
  if (r.mem_mb > node->mem_mb) {
    over.push_back(fmt::format("memMB={} (it has {})", r.mem_mb, node->mem_mb));
  }
  for (const auto& [device, n] : r.devices) {
    auto have = node->devices.find(device);
    const int has = have == node->devices.end() ? 0 : have->second;
    if (n > has) over.push_back(fmt::format("{}={} (it has {})", device, n, has));
  }
  if (over.empty()) return "";
  std::string all;
  for (const auto& x : over) all += (all.empty() ? "" : ", ") + x;
  return fmt::format("role '{}': cannot fit on a {} node, which its resource asks for: {}",
                     role.name, type, all);
}

void CheckName(Problems& p, const std::string& what, const std::string& name, size_t longest,
               const std::string& fix) {
  if (longest > kMaxName) {
    p.Add(fmt::format("{} '{}' may be {} characters long, and Kubernetes allows {}: {}", what, name,
                      longest, kMaxName, fix));
  }
}

// The role as the pods run it: macros filled, the submitter's trun replaced.
// TORCHX_JOB_ID is the app's handle, whose app id is NAMESPACE:NAME, not
// the ${app_id} of the commands.
specs::Role ForPods(const specs::Role& role, const specs::MacroValues& values,
                    const std::string& submitter_trun, const std::string& trun_path,
                    const std::string& handle_app_id) {
  specs::Role given = role;
  if (auto it = given.env.find("TORCHX_JOB_ID"); it != given.env.end()) {
    if (size_t at = it->second.find(specs::kMacroAppId); at != std::string::npos) {
      it->second.replace(at, specs::kMacroAppId.size(), handle_app_id);
    }
  }
  specs::Role r = values.Apply(given);
  if (submitter_trun.empty() || submitter_trun == trun_path) return r;
  auto replace = [&](std::string& s) {
    for (size_t at = s.find(submitter_trun); at != std::string::npos;
         at = s.find(submitter_trun, at + trun_path.size())) {
      s.replace(at, submitter_trun.size(), trun_path);
    }
  };
  replace(r.entrypoint);
  for (auto& a : r.args) replace(a);
  return r;
}

ordered_json EnvVar(const std::string& name, const std::string& value) {
  if (value.starts_with(kFieldPath)) {
    return {{"name", name},
            {"valueFrom", {{"fieldRef", {{"fieldPath", value.substr(kFieldPath.size())}}}}}};
  }
  return {{"name", name}, {"value", value}};
}

struct PodContext {
  const Options* o = nullptr;
  std::string container;  // the container's name
  std::string rank0_host;
  std::string rank0_var;  // its variable (TorchX's VC_..._HOSTS for volcano)
  bool wait_for_rank0 = false;
  std::vector<ordered_json> extra_env;  // before the role's, so those may use them
  ordered_json labels;
};

ordered_json Resources(const specs::Resource& r, const Options& o) {
  ordered_json limits = ordered_json::object(), requests = ordered_json::object();
  if (r.cpu > 0) {
    long long mcpu = r.cpu * 1000LL;
    limits["cpu"] = fmt::format("{}m", mcpu);
    requests["cpu"] = fmt::format("{}m", std::max(mcpu - o.reserved_millicpu, 0LL));
  }
  if (r.mem_mb > 0) {
    limits["memory"] = fmt::format("{}M", r.mem_mb);
    requests["memory"] = fmt::format("{}M", std::max(r.mem_mb - o.reserved_memmb, 0LL));
  }
  if (r.gpu > 0) requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = std::to_string(r.gpu);
  for (const auto& [device, n] : r.devices) limits[device] = std::to_string(n);
  constexpr const char* kEfa = "vpc.amazonaws.com/efa";
  if (o.efa_device_count) {
    if (*o.efa_device_count == 0) {
      limits.erase(kEfa);
    } else {
      limits[kEfa] = std::to_string(*o.efa_device_count);
    }
  }
  return {{"limits", limits}, {"requests", requests}};
}

// The pod of one replica (volcano) or of every replica of a role.
ordered_json Pod(const specs::Role& role, const PodContext& c) {
  const Options& o = *c.o;
  ordered_json volumes = ordered_json::array(), mounts = ordered_json::array();
  // PyTorch's data loaders need more than the 64 MB /dev/shm a container
  // gets: an unbounded tmpfs, as TorchX mounts.
  volumes.push_back({{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}}}});
  mounts.push_back({{"name", "dshm"}, {"mountPath", "/dev/shm"}});
  bool privileged = false;
  for (size_t i = 0; i < role.mounts.size(); ++i) {
    const specs::Mount& m = role.mounts[i];
    const std::string name = fmt::format("mount-{}", i);
    bool read_only = m.read_only;
    if (m.type == specs::MountType::kVolume) {
      volumes.push_back({{"name", name}, {"persistentVolumeClaim", {{"claimName", m.src}}}});
    } else {
      volumes.push_back({{"name", name}, {"hostPath", {{"path", m.src}}}});
    }
    if (m.type == specs::MountType::kDevice) {
      read_only = m.permissions.find_first_of("wm") == std::string::npos;
      // Kubernetes has no --device: a host device needs a privileged container.
      privileged = true;
    }
    ordered_json vm = {{"name", name}, {"mountPath", m.dst}};
    if (read_only) vm["readOnly"] = true;
    mounts.push_back(vm);
  }

  ordered_json env = ordered_json::array();
  for (const auto& e : c.extra_env) env.push_back(e);
  std::set<std::string> named;
  for (const auto& e : c.extra_env) named.insert(e["name"].get<std::string>());
  for (const auto& [k, v] : role.env) {
    if (named.count(k)) {
      for (auto& e : env) {
        if (e["name"] == k) e = EnvVar(k, v);
      }
    } else {
      env.push_back(EnvVar(k, v));
    }
  }

  std::vector<std::string> command = {role.entrypoint};
  command.insert(command.end(), role.args.begin(), role.args.end());
  if (c.wait_for_rank0) {
    // The first replica's DNS record appears once its pod has an address;
    // an agent that looked it up earlier would not know it hosts the
    // rendezvous. "$$" is the kubelet's escape of "$(" in a command.
    const std::string wait = fmt::format(
        "i=0; until getent hosts \"${0}\" >/dev/null 2>&1; do i=$$((i+1)); "
        "if [ \"$i\" -ge {1} ]; then echo \"trun: ${0} does not resolve after {1} s\" >&2; "
        "exit 1; fi; sleep 1; done; exec \"$@\"",
        c.rank0_var, kDnsWaitSeconds);
    command.insert(command.begin(), {"sh", "-c", wait, "trun-wait-for-rank0"});
  }
  ordered_json container = {{"name", c.container},
                            {"image", role.image},
                            {"command", command},
                            {"env", env},
                            {"resources", Resources(role.resource, o)}};
  if (!role.port_map.empty()) {
    ordered_json ports = ordered_json::array();
    for (const auto& [name, port] : role.port_map) {
      ports.push_back({{"name", name}, {"containerPort", port}});
    }
    container["ports"] = ports;
  }
  if (!o.trun_image.empty()) {
    volumes.push_back({{"name", "trun-bin"}, {"emptyDir", ordered_json::object()}});
    mounts.push_back({{"name", "trun-bin"}, {"mountPath", kTrunBinDir}, {"readOnly", true}});
  }
  container["volumeMounts"] = mounts;
  // trun's agent writes the root cause of a failure here
  // (TORCHELASTIC_ERROR_FILE), where Kubernetes reads a container's
  // termination message; other failures leave the log's last lines.
  container["terminationMessagePath"] = "/dev/termination-log";
  container["terminationMessagePolicy"] = "FallbackToLogsOnError";
  if (privileged) container["securityContext"] = {{"privileged", true}};

  ordered_json spec;
  if (!o.trun_image.empty()) {
    spec["initContainers"] = ordered_json::array(
        {{{"name", "trun-install"},
          {"image", o.trun_image},
          {"command", {"sh", "-c", fmt::format("cp \"$(command -v trun)\" {}/trun", kTrunBinDir)}},
          {"volumeMounts", {{{"name", "trun-bin"}, {"mountPath", kTrunBinDir}}}}}});
  }
  spec["containers"] = ordered_json::array({container});
  spec["restartPolicy"] = "Never";
  if (!o.service_account.empty()) spec["serviceAccountName"] = o.service_account;
  spec["volumes"] = volumes;
  ordered_json node_selector = ordered_json::object();
  const auto& caps = role.resource.capabilities;
  if (auto it = caps.find(std::string(kInstanceTypeLabel)); it != caps.end() && it->is_string()) {
    node_selector[std::string(kInstanceTypeLabel)] = *it;
  }
  for (const auto& [k, v] : o.node_selector) node_selector[k] = v;
  if (!node_selector.empty()) spec["nodeSelector"] = node_selector;
  if (!o.tolerations.empty()) {
    ordered_json tolerations = ordered_json::array();
    for (const auto& t : o.tolerations) tolerations.push_back(*Toleration(t));
    spec["tolerations"] = tolerations;
  }
  if (!o.priority_class.empty() && o.workload != Workload::kVolcano) {
    spec["priorityClassName"] = o.priority_class;
  }
  return {{"metadata",
           // The istio sidecar keeps a pod alive after its container exits.
           {{"annotations", {{"sidecar.istio.io/inject", "false"}}}, {"labels", c.labels}}},
          {"spec", spec}};
}

ordered_json Labels(const specs::AppDef& app, const std::string& name, Workload w) {
  return {{std::string(kLabelVersion), LabelValue(TRUN_VERSION)},
          {std::string(kLabelAppName), LabelValue(app.name)},
          {std::string(kLabelKubeAppName), LabelValue(app.name)},
          {std::string(kLabelManagedBy), kManagedBy},
          {std::string(kLabelInstance), LabelValue(name)},
          {std::string(kLabelWorkload), WorkloadName(w)}};
}

ordered_json PodLabels(const ordered_json& app_labels, int role_index, const specs::Role& role,
                       std::optional<int> replica) {
  ordered_json l = app_labels;
  l[std::string(kLabelRoleIndex)] = std::to_string(role_index);
  l[std::string(kLabelRoleName)] = LabelValue(role.name);
  if (replica) l[std::string(kLabelReplicaId)] = std::to_string(*replica);
  return l;
}

// TorchX's operator keys (torchx.specs.overlays: PUT, JOIN, DEL), and the key
// set_overlay marks a namespace of overlays by kind with.
constexpr std::string_view kPutPrefix = "__put__:";
constexpr std::string_view kJoinPrefix = "__join__:";
constexpr std::string_view kDelPrefix = "__del__:";
constexpr std::string_view kOverlaysMarker = "__torchx_overlays__";

// The problems of an overlay's JOIN keys (a key field, a list of objects), at
// every depth; MergeOverlay then needs no checks.
void CheckOverlay(const json& overlay, const std::string& at, std::vector<std::string>& out) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    const std::string path = at.empty() ? it.key() : at + "." + it.key();
    if (it.key().starts_with(kJoinPrefix)) {
      const std::string rest = it.key().substr(kJoinPrefix.size());
      const size_t colon = rest.find(':');
      if (colon == std::string::npos || colon + 1 == rest.size()) {
        out.push_back(
            fmt::format("{}: a JOIN key needs the field to match items on; write "
                        "JOIN(\"{}\", on=\"name\")",
                        path, rest.substr(0, colon)));
      }
      if (!it->is_array() ||
          !std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_object(); })) {
        out.push_back(fmt::format("{}: JOIN needs a list of objects, got {}", path, it->dump()));
      }
    } else if (it->is_object()) {
      CheckOverlay(*it, path, out);
    }
  }
}

// The role's `kubernetes` metadata as written: an object, or a file:// URI
// or path of a YAML one.
Result<json> RawOverlay(const specs::Role& role) {
  auto it = role.metadata.find("kubernetes");
  if (it == role.metadata.end() || it->is_null()) return json::object();
  if (it->is_object()) return *it;
  if (it->is_string()) {
    std::string path = it->get<std::string>();
    if (path.starts_with("file://")) path = path.substr(7);
    if (path.find("://") != std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("role '{}': metadata kubernetes={}: only file:// URIs and paths are read",
                      role.name, path));
    }
    auto text = ReadFile(path);
    if (!text.ok()) {
      return Status::InvalidArgument(
          fmt::format("role '{}': metadata kubernetes: {}", role.name, text.status().message()));
    }
    auto j = specs::ParseYaml(*text);
    if (!j.ok() || !j->is_object()) {
      return Status::InvalidArgument(
          fmt::format("role '{}': metadata kubernetes: {} is not a YAML object{}", role.name, path,
                      j.ok() ? "" : ": " + j.status().message()));
    }
    return *j;
  }
  return Status::InvalidArgument(fmt::format(
      "role '{}': metadata kubernetes must be a pod overlay object or a file path, not {}",
      role.name, it->type_name()));
}

// The pod overlay in the role's `kubernetes` metadata: set_overlay's nested
// form (its V1Pod kind), or TorchX's older flat form, each an object or a
// file:// URI or path of a YAML one.
Result<json> Overlay(const specs::Role& role) {
  auto raw = RawOverlay(role);
  if (!raw.ok() || !raw->is_object()) return raw;
  const json& o = *raw;
  const bool nested =
      o.contains(std::string(kOverlaysMarker)) && o[std::string(kOverlaysMarker)] == true;
  const bool has_kind = o.contains("V1Pod") && o["V1Pod"].is_object();
  json pod = has_kind ? o["V1Pod"] : nested ? json::object() : o;
  std::vector<std::string> problems;
  CheckOverlay(pod, "", problems);
  if (!problems.empty()) {
    return Status::InvalidArgument(
        fmt::format("role '{}': metadata kubernetes: {}", role.name, fmt::join(problems, "; ")));
  }
  return pod;
}

// The retry settings of a Volcano task (TorchX's RETRY_POLICIES).
void VolcanoRetries(ordered_json& task, const specs::Role& role) {
  if (role.max_retries <= 0) return;
  task["maxRetry"] = role.max_retries;
  if (role.retry_policy == specs::RetryPolicy::kReplica) {
    task["policies"] = ordered_json::array();
  } else {
    // Each replica is its own task, so a role can only restart with the job.
    task["policies"] = {{{"event", "PodEvicted"}, {"action", "RestartJob"}},
                        {{"event", "PodFailed"}, {"action", "RestartJob"}}};
  }
}

}  // namespace

std::string_view WorkloadName(Workload w) {
  switch (w) {
    case Workload::kVolcano:
      return "volcano";
    case Workload::kJobSet:
      return "jobset";
    case Workload::kJob:
      return "job";
  }
  return "volcano";
}

specs::RunOpts KubernetesRunOpts() {
  using specs::OptType;
  specs::RunOpts o;
  o.Add("namespace", OptType::kStr, "Kubernetes namespace to schedule job in",
        std::string("default"));
  o.Add("queue", OptType::kStr, "Volcano queue to schedule job in (workload=volcano)");
  o.Add("workload", OptType::kStr,
        "volcano (a Volcano Job, as TorchX), jobset (a JobSet), job (Indexed Jobs and a "
        "headless Service: no add-on) or auto (jobset where the cluster has JobSet, else job)",
        std::string("volcano"));
  o.Add("service_account", OptType::kStr, "The service account name to set on the pod specs");
  o.Add("priority_class", OptType::kStr, "The name of the PriorityClass to set on the job specs");
  o.Add("image_repo", OptType::kStr,
        "The image repository TorchX pushes workspace images to (trun builds none)");
  o.Add("validate_spec", OptType::kBool,
        "Validate job spec using Kubernetes API dry-run before submission", true);
  o.Add("reserved_millicpu", OptType::kInt,
        "Amount of CPU in millicores to reserve for Kubernetes system overhead (default: 100)",
        kReservedMilliCpu);
  o.Add("reserved_memmb", OptType::kInt,
        "Amount of memory in MB to reserve for Kubernetes system overhead (default: 1024)",
        kReservedMemMb);
  o.Add("efa_device_count", OptType::kInt,
        "EFA device count override: None/unset=use resource spec, 0=remove EFA, N>0=set EFA "
        "count to N");
  o.Add("node_selector", OptType::kDictStr, "node labels every pod needs (k:v,k2:v2)");
  o.Add("tolerations", OptType::kListStr,
        "taints the pods tolerate: KEY[=VALUE][:EFFECT], several separated by ';'");
  o.Add("kueue_queue", OptType::kStr, "the Kueue LocalQueue (label kueue.x-k8s.io/queue-name)");
  o.Add("trun_image", OptType::kStr,
        "an image with trun on its PATH, copied into each pod by an init container");
  o.Add("trun_path", OptType::kStr,
        "the trun the pods run in place of this one (default: /opt/trun/bin/trun with "
        "trun_image, else trun on the image's PATH)");
  return o;
}

std::string Normalize(std::string_view s) {
  std::string out;
  for (char c : s) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-') out += l;
  }
  size_t first = out.find_first_not_of('-');
  return first == std::string::npos ? "" : out.substr(first);
}

std::string LabelValue(std::string_view s) {
  std::string out;
  for (char c : s) out += (Alnum(c) || c == '-' || c == '_' || c == '.') ? c : '.';
  if (out.size() > kMaxName) out.resize(kMaxName);
  size_t first = 0;
  while (first < out.size() && !Alnum(out[first])) ++first;
  out.erase(0, first);
  while (!out.empty() && !Alnum(out.back())) out.pop_back();
  return out;
}

bool IsDnsLabel(std::string_view s) {
  return !s.empty() && s.size() <= kMaxName && Alnum(s.front()) && Alnum(s.back()) &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

void MergeOverlay(ordered_json& base, const json& overlay) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    const std::string& key = it.key();
    if (key.starts_with(kDelPrefix)) {
      base.erase(key.substr(kDelPrefix.size()));
      continue;
    }
    if (key.starts_with(kPutPrefix)) {
      base[key.substr(kPutPrefix.size())] = *it;
      continue;
    }
    if (key.starts_with(kJoinPrefix)) {
      const std::string rest = key.substr(kJoinPrefix.size());
      const std::string field = rest.substr(0, rest.find(':'));
      const std::string on = rest.substr(field.size() + 1);
      auto at = base.find(field);
      if (at == base.end() || !at->is_array()) {
        base[field] = *it;
        continue;
      }
      // Items match the base as it was: two new items with one key both land.
      std::map<std::string, size_t> by_key;
      for (size_t i = 0; i < at->size(); ++i) {
        const auto& item = (*at)[i];
        if (item.is_object() && item.contains(on)) by_key[item[on].dump()] = i;
      }
      for (const auto& item : *it) {
        auto match = item.contains(on) ? by_key.find(item[on].dump()) : by_key.end();
        if (match == by_key.end()) {
          at->push_back(ordered_json(item));
          continue;
        }
        for (auto f = item.begin(); f != item.end(); ++f) {
          if (f.key() != on) (*at)[match->second][f.key()] = *f;
        }
      }
      continue;
    }
    auto at = base.find(key);
    if (at != base.end() && at->is_object() && it->is_object()) {
      MergeOverlay(*at, *it);
    } else if (at != base.end() && at->is_array() && it->is_array()) {
      for (const auto& v : *it) at->push_back(ordered_json(v));
    } else {
      base[key] = *it;
    }
  }
}

namespace {

// Checks every role against Kubernetes' rules and the workload's longest
// names, adding each problem to `p`, and records the roles' names in
// `req`. Returns each role's pod overlay, in role order.
std::vector<json> ReadRoles(const specs::AppDef& app, Workload workload, Request& req,
                            Problems& p) {
  const size_t grow = kMaxUnique > req.unique.size() ? kMaxUnique - req.unique.size() : 0;
  const std::string shorten = "shorten the app name (--name) or the role names";
  std::vector<json> overlays;
  std::set<std::string> seen;
  for (const auto& role : app.roles) {
    const std::string n = Normalize(role.name);
    if (n.empty()) {
      p.Add(fmt::format("role '{}': Kubernetes names need letters or digits", role.name));
    } else if (!seen.insert(n).second) {
      p.Add(fmt::format("role '{}': another role has the same Kubernetes name '{}'", role.name, n));
    }
    req.roles.emplace_back(n, role.num_replicas);
    if (role.workspace) {
      p.Add(fmt::format(
          "role '{}': trun builds no workspace images; build and push the image, then name it "
          "in the role",
          role.name));
    }
    if (role.image.empty()) {
      p.Add(fmt::format("role '{}': the kubernetes scheduler needs an image", role.name));
    }
    if (auto fit = Fits(role); !fit.empty()) p.Add(fit);
    for (const auto& [name, port] : role.port_map) {
      if (!IsPortName(name)) {
        p.Add(fmt::format(
            "role '{}': port name '{}': Kubernetes needs at most 15 of a-z, 0-9 and '-' with a "
            "letter",
            role.name, name));
      }
    }
    for (const auto& m : role.mounts) {
      if (m.type == specs::MountType::kVolume && !IsDnsLabel(m.src)) {
        p.Add(fmt::format("role '{}': volume '{}' is not a PersistentVolumeClaim name", role.name,
                          m.src));
      }
      if (!m.dst.starts_with("/")) {
        p.Add(fmt::format("role '{}': mount destination '{}' is not an absolute path", role.name,
                          m.dst));
      }
    }
    auto overlay = Overlay(role);
    if (!overlay.ok()) {
      p.Add(overlay.status().message());
      overlays.push_back(json::object());
    } else {
      overlays.push_back(*overlay);
    }
    // The longest names the role's pods get.
    const size_t name_len = req.name.size() + grow;
    const size_t index_len = std::to_string(std::max(role.num_replicas - 1, 0)).size();
    switch (workload) {
      case Workload::kVolcano:  // pod NAME-ROLE-K-0
        CheckName(p, fmt::format("role '{}': the pod name", role.name),
                  fmt::format("{}-{}-{}-0", req.name, n, role.num_replicas - 1),
                  name_len + n.size() + index_len + 4, shorten);
        break;
      case Workload::kJobSet:  // pod host name NAME-ROLE-0-K
        CheckName(p, fmt::format("role '{}': the pod host name", role.name),
                  fmt::format("{}-{}-0-{}", req.name, n, role.num_replicas - 1),
                  name_len + n.size() + index_len + 4, shorten);
        break;
      case Workload::kJob:  // Job NAME-ROLE, pod host name NAME-ROLE-K
        CheckName(p, fmt::format("role '{}': the pod host name", role.name),
                  fmt::format("{}-{}-{}", req.name, n, role.num_replicas - 1),
                  name_len + n.size() + index_len + 2, shorten);
        break;
    }
  }
  return overlays;
}

// What every workload's builder shares: the checked app and run options,
// and what MakeRequest derives from them once.
struct Build {
  const specs::AppDef& app;
  const Options& o;
  const std::string& submitter_trun;
  std::vector<json> overlays;  // each role's pod overlay, in role order
  ordered_json app_labels;
  ordered_json meta;  // the top object's metadata
  std::string role0;  // the first role's name, whose replica 0 is rank 0's host
  std::string rank0_host;
  ordered_json token_env;  // TRUN_JOB_TOKEN from the Secret
};

// Kubeflow's training operator gives workers PET_* (torchrun's flags as
// variables), which trun reads as torchrun does: `trun train.py` in a pod
// needs no flags.
std::vector<ordered_json> PetEnv(const Build& b, const specs::Role& role,
                                 const std::string& node_rank) {
  std::vector<ordered_json> env;
  env.push_back(EnvVar(
      "PET_NNODES", role.min_replicas && *role.min_replicas != role.num_replicas
                        ? fmt::format("{}:{}", std::max(*role.min_replicas, 1), role.num_replicas)
                        : std::to_string(role.num_replicas)));
  env.push_back(EnvVar("PET_NODE_RANK", node_rank));
  env.push_back(EnvVar("PET_MASTER_ADDR", b.rank0_host));
  env.push_back(EnvVar("PET_MASTER_PORT", std::to_string(kMasterPort)));
  if (role.resource.gpu > 0) {
    env.push_back(EnvVar("PET_NPROC_PER_NODE", std::to_string(role.resource.gpu)));
  }
  return env;
}

// The fewest retries of any role: what a workload that restarts the whole
// app at once allows it.
int MinRetries(const specs::AppDef& app) {
  int n = app.roles.front().max_retries;
  for (const auto& role : app.roles) n = std::min(n, role.max_retries);
  return n;
}

// volcano: one Volcano Job, one task of one pod per replica.
void AddVolcanoJob(const Build& b, Request& req) {
  ordered_json tasks = ordered_json::array();
  std::string rank0_var;
  for (char c : fmt::format("VC_{}_0_HOSTS", b.role0)) {
    rank0_var += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  for (size_t ri = 0; ri < b.app.roles.size(); ++ri) {
    const specs::Role& role = b.app.roles[ri];
    for (int k = 0; k < role.num_replicas; ++k) {
      const bool first = ri == 0 && k == 0;
      specs::MacroValues values{"", req.name, std::to_string(k),
                                first ? std::string(kRank0Var) : rank0_var};
      specs::Role r = ForPods(role, values, b.submitter_trun, b.o.trun_path, req.AppId());
      const std::string task_name = fmt::format("{}-{}", req.roles[ri].first, k);
      PodContext c{&b.o, task_name, b.rank0_host, rank0_var, false, {}, {}};
      c.extra_env = PetEnv(b, role, std::to_string(k));
      if (first) c.extra_env.push_back(EnvVar(std::string(kRank0Var), "localhost"));
      c.extra_env.push_back(EnvVar("TORCHX_IMAGE", r.image));
      c.extra_env.push_back(EnvVar("TORCHELASTIC_ERROR_FILE", "/dev/termination-log"));
      c.extra_env.push_back(b.token_env);
      c.labels = PodLabels(b.app_labels, static_cast<int>(ri), role, k);
      ordered_json pod = Pod(r, c);
      MergeOverlay(pod, b.overlays[ri]);
      ordered_json task = {{"replicas", 1}, {"name", task_name}, {"template", pod}};
      VolcanoRetries(task, role);
      if (role.min_replicas) task["minAvailable"] = k < *role.min_replicas ? 1 : 0;
      tasks.push_back(task);
    }
  }
  ordered_json spec = {
      {"schedulerName", "volcano"},
      {"queue", b.o.queue},
      {"tasks", tasks},
      {"maxRetry", MinRetries(b.app)},
      // Volcano's svc plugin names each pod in DNS and sets VC_*_HOSTS.
      {"plugins", {{"svc", {"--publish-not-ready-addresses"}}, {"env", ordered_json::array()}}}};
  if (!b.o.priority_class.empty()) spec["priorityClassName"] = b.o.priority_class;
  req.objects.push_back({{"apiVersion", "batch.volcano.sh/v1alpha1"},
                         {"kind", "Job"},
                         {"metadata", b.meta},
                         {"spec", spec}});
}

// jobset and job: an Indexed Job's spec per role, one pod template for all
// its replicas; the replica is the pod's completion index.
std::vector<ordered_json> IndexedJobSpecs(const Build& b, const Request& req) {
  const std::string replica_macro = fmt::format("$({})", kReplicaVar);
  std::vector<ordered_json> jobs;
  for (size_t ri = 0; ri < b.app.roles.size(); ++ri) {
    const specs::Role& role = b.app.roles[ri];
    specs::MacroValues values{"", req.name, replica_macro, std::string(kRank0Var)};
    specs::Role r = ForPods(role, values, b.submitter_trun, b.o.trun_path, req.AppId());
    std::string all = role.entrypoint;
    for (const auto& a : role.args) all += " " + a;
    for (const auto& [k, v] : role.env) all += " " + v;
    const bool uses_rank0 = all.find("rank0_env") != std::string::npos;
    PodContext c{&b.o, req.roles[ri].first, b.rank0_host, std::string(kRank0Var), uses_rank0, {},
                 {}};
    c.extra_env.push_back(
        {{"name", std::string(kReplicaVar)},
         {"valueFrom",
          {{"fieldRef",
            {{"fieldPath", fmt::format("metadata.labels['{}']", kLabelCompletionIndex)}}}}}});
    for (auto& e : PetEnv(b, role, replica_macro)) c.extra_env.push_back(e);
    c.extra_env.push_back(EnvVar(std::string(kRank0Var), b.rank0_host));
    c.extra_env.push_back(EnvVar("TORCHX_IMAGE", r.image));
    c.extra_env.push_back(EnvVar("TORCHELASTIC_ERROR_FILE", "/dev/termination-log"));
    c.extra_env.push_back(b.token_env);
    c.labels = PodLabels(b.app_labels, static_cast<int>(ri), role, std::nullopt);
    ordered_json pod = Pod(r, c);
    if (b.o.workload == Workload::kJob) pod["spec"]["subdomain"] = req.name;
    MergeOverlay(pod, b.overlays[ri]);
    // A failed pod is replaced up to max_retries times per replica: the
    // others' agents see a node leave and come back, and re-rendezvous.
    ordered_json job_spec = {{"completionMode", "Indexed"},
                             {"completions", role.num_replicas},
                             {"parallelism", role.num_replicas}};
    if (b.o.workload == Workload::kJob) {
      job_spec["backoffLimitPerIndex"] = role.max_retries;
      job_spec["maxFailedIndexes"] = 0;
    } else {
      job_spec["backoffLimit"] = 0;
    }
    job_spec["template"] = pod;
    jobs.push_back(job_spec);
  }
  return jobs;
}

// jobset: one JobSet with a replicated job per role.
void AddJobSet(const Build& b, Request& req) {
  std::vector<ordered_json> jobs = IndexedJobSpecs(b, req);
  ordered_json replicated = ordered_json::array();
  for (size_t ri = 0; ri < jobs.size(); ++ri) {
    replicated.push_back(
        {{"name", req.roles[ri].first}, {"replicas", 1}, {"template", {{"spec", jobs[ri]}}}});
  }
  // JobSet restarts every job when one fails: retry_policy APPLICATION.
  ordered_json spec = {
      {"network", {{"enableDNSHostnames", true}, {"publishNotReadyAddresses", true}}},
      {"failurePolicy", {{"maxRestarts", MinRetries(b.app)}}},
      {"replicatedJobs", replicated}};
  req.objects.push_back({{"apiVersion", "jobset.x-k8s.io/v1alpha2"},
                         {"kind", "JobSet"},
                         {"metadata", b.meta},
                         {"spec", spec}});
}

// job: a headless Service named after the app, then an Indexed Job per
// role, whose pods are in the Service's subdomain.
void AddServiceAndJobs(const Build& b, Request& req) {
  std::vector<ordered_json> jobs = IndexedJobSpecs(b, req);
  ordered_json service_meta = b.meta;
  service_meta["labels"].erase("kueue.x-k8s.io/queue-name");
  req.objects.push_back({{"apiVersion", "v1"},
                         {"kind", "Service"},
                         {"metadata", service_meta},
                         {"spec",
                          {{"clusterIP", "None"},
                           {"publishNotReadyAddresses", true},
                           {"selector", {{std::string(kLabelInstance), LabelValue(req.name)}}}}}});
  for (size_t ri = 0; ri < jobs.size(); ++ri) {
    ordered_json job_meta = b.meta;
    job_meta["name"] = fmt::format("{}-{}", req.name, req.roles[ri].first);
    req.objects.push_back(
        {{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"metadata", job_meta}, {"spec", jobs[ri]}});
  }
}

}  // namespace

Result<Request> MakeRequest(const specs::AppDef& app, const specs::Cfg& cfg,
                            const std::string& unique, const std::string& submitter_trun) {
  Problems p;
  Options o = ReadOptions(cfg, p);
  for (const auto& t : o.tolerations) {
    if (auto r = Toleration(t); !r.ok()) p.Add(r.status().message());
  }
  Request req;
  req.ns = o.ns;
  req.workload = o.workload;
  req.validate_spec = o.validate_spec;
  req.auto_workload = o.auto_workload;
  req.base = Normalize(app.name);
  if (req.base.empty()) {
    p.Add(fmt::format("app name '{}': Kubernetes names need letters or digits", app.name));
  }
  req.unique = unique;
  req.name = req.base + "-" + unique;
  std::vector<json> overlays = ReadRoles(app, o.workload, req, p);
  if (!p.empty()) return p.ToStatus();

  Build b{app, o, submitter_trun, std::move(overlays), Labels(app, req.name, o.workload), {}, {},
          {},  {}};
  // The AppDef, so that `describe` answers from any machine.
  b.meta = {{"name", req.name},
            {"namespace", req.ns},
            {"labels", b.app_labels},
            {"annotations", {{std::string(kAnnotationAppDef), specs::ToJson(app).dump()}}}};
  if (!o.kueue_queue.empty()) b.meta["labels"]["kueue.x-k8s.io/queue-name"] = o.kueue_queue;
  b.role0 = Normalize(app.roles.front().name);
  b.rank0_host = o.workload == Workload::kJob
                     ? fmt::format("{}-{}-0.{}", req.name, b.role0, req.name)
                     : fmt::format("{}-{}-0-0.{}", req.name, b.role0, req.name);
  b.token_env = {
      {"name", kJobTokenEnv},
      {"valueFrom", {{"secretKeyRef", {{"name", req.name}, {"key", std::string(kJobTokenKey)}}}}}};

  // The job token, first: the pods read it from the Secret when they start.
  req.objects.push_back(
      {{"apiVersion", "v1"},
       {"kind", "Secret"},
       {"metadata", {{"name", req.name}, {"namespace", req.ns}, {"labels", b.app_labels}}},
       {"type", "Opaque"},
       {"stringData", {{std::string(kJobTokenKey), store::NewJobToken()}}}});
  switch (o.workload) {
    case Workload::kVolcano:
      AddVolcanoJob(b, req);
      break;
    case Workload::kJobSet:
      AddJobSet(b, req);
      break;
    case Workload::kJob:
      AddServiceAndJobs(b, req);
      break;
  }
  return req;
}

bool SetJobToken(Request& req, const std::string& token) {
  for (auto& obj : req.objects) {
    if (obj.value("apiVersion", "") == "v1" && obj.value("kind", "") == "Secret" &&
        obj["metadata"].value("name", "") == req.name) {
      obj["stringData"][std::string(kJobTokenKey)] = token;
      return true;
    }
  }
  return false;
}

std::string FormatManifests(const Request& req) {
  std::string out;
  for (const auto& obj : req.objects) out += "---\n" + specs::ToYaml(obj);
  return out;
}

std::string FormatRequest(const Request& req) {
  std::string out =
      req.auto_workload
          ? "# workload=auto: this JobSet where the cluster serves jobset.x-k8s.io/v1alpha2, else\n"
            "# a headless Service and Indexed Jobs (workload=job), decided when submitted.\n"
          : "";
  return out + FormatManifests(req);
}

ordered_json Request::ToJson() const {
  ordered_json j = {{"namespace", ns},
                    {"name", name},
                    {"workload", WorkloadName(workload)},
                    {"validate_spec", validate_spec},
                    {"auto", auto_workload}};
  j["roles"] = ordered_json::array();
  for (const auto& [n, k] : roles) j["roles"].push_back({{"name", n}, {"replicas", k}});
  j["objects"] = objects;
  return j;
}

}  // namespace trun::schedulers::kube
