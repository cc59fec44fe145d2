// The Kubernetes objects the kubernetes scheduler creates for an AppDef,
// built without asking the cluster anything (so `trun run --dryrun -s
// kubernetes` works anywhere and prints what `kubectl apply -f -` accepts).
//
// Three workloads (run option `workload`; docs/design.md says why):
//
//   volcano  one Volcano Job (batch.volcano.sh/v1alpha1), as TorchX builds
//            it: one task of one pod per replica, named ROLE-K, so macros
//            may differ per replica; TorchX's labels, retry policies and
//            ${rank0_env} (VC_ROLE0_0_HOSTS, set by Volcano's svc plugin;
//            TORCHX_RANK0_HOST=localhost on replica 0).
//   jobset   one JobSet (jobset.x-k8s.io/v1alpha2) with a replicated job
//            per role, each an Indexed Job of num_replicas pods.
//   job      no add-on at all: a headless Service named after the app and
//            one Indexed Job per role (NAME-ROLE) whose pods are in the
//            Service's subdomain.
//   auto     a JobSet, made again as `job` at submission where the cluster
//            serves no JobSet API.
//
// Every workload starts with a Secret (v1, Opaque) of the app's name that
// holds the job token (store/auth.h) under the key `job-token`; the
// container of each replica reads it as TRUN_JOB_TOKEN (env valueFrom
// secretKeyRef), so the token is in no pod spec, command line or
// annotation. MakeRequest puts a fresh token there (a dry run's manifests
// are complete for `kubectl apply -f -`); submission replaces it
// (SetJobToken) and makes the Secret owned by the app's first object, so
// Kubernetes deletes it with the app.
//
// In every workload replica K of role R has a stable DNS name, and
// TORCHX_RANK0_HOST (or VC_..._HOSTS) names replica 0 of the first role,
// where dist.ddp's `trun` agents meet for the c10d rendezvous. With jobset
// and job one pod template serves every replica of a role, so
// ${replica_id} becomes $(TRUN_REPLICA_ID), which the kubelet expands from
// the pod's completion index.
//
// Names follow TorchX: the app id is normalize(app name)-RANDOM, role names
// are normalized ([a-z0-9-], lower case); label values are cleaned to
// Kubernetes' label syntax. Every name a pod gets (object names, host
// names, label values) must fit in 63 characters; a name that does not, a
// namespace that is not a DNS label, a role that cannot fit on the node
// type its resource names, and every other problem is reported at once,
// before anything is sent. The node reserve (reserved_millicpu,
// reserved_memmb) lowers a pod's requests, never below 0, as TorchX's does.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "specs/app.h"
#include "specs/runopts.h"

namespace trun::schedulers::kube {

enum class Workload { kVolcano, kJobSet, kJob };
std::string_view WorkloadName(Workload w);  // "volcano", "jobset", "job"

// TorchX's defaults for the part of a node Kubernetes keeps for itself.
inline constexpr long long kReservedMilliCpu = 100;
inline constexpr long long kReservedMemMb = 1024;
// Where the init container of `trun_image` puts trun in every pod.
inline constexpr std::string_view kTrunBinDir = "/opt/trun/bin";

// The run options, declared for `trun runopts kubernetes`.
specs::RunOpts KubernetesRunOpts();

struct Request {
  std::string ns;  // the namespace
  // The app's unique name (the Volcano Job, JobSet or Service): `base`,
  // the normalized app name, then '-' and `unique`, the random part, which
  // a request made again (auto mode at submission) keeps.
  std::string name;
  std::string base;
  std::string unique;
  Workload workload = Workload::kVolcano;
  bool validate_spec = true;
  bool auto_workload = false;                      // workload=auto: `job` where JobSet is missing
  std::vector<std::pair<std::string, int>> roles;  // normalized name, replicas
  // In the order they are created: the Secret with the job token first,
  // then a Service before the Jobs in it.
  std::vector<nlohmann::ordered_json> objects;

  // The app id of the handle: NAMESPACE:NAME, as TorchX.
  std::string AppId() const { return ns + ":" + name; }
  // As `trun run --dryrun --json` prints it.
  nlohmann::ordered_json ToJson() const;
};

// The objects for `app` under the resolved run config `cfg`. `unique` is
// the random part of the name (RandomId()); `submitter_trun` is the path of
// the trun that built the components, replaced in the roles' commands by
// the trun of the pods (`trun_path`).
Result<Request> MakeRequest(const specs::AppDef& app, const specs::Cfg& cfg,
                            const std::string& unique, const std::string& submitter_trun);

// Puts `token` in the request's job token Secret; false when the request
// has none (a record made before trun had one).
bool SetJobToken(Request& req, const std::string& token);
// The key of the job token in the Secret.
inline constexpr std::string_view kJobTokenKey = "job-token";

// The objects as YAML documents, each after a "---" line, and nothing else:
// what `kubectl apply -f -` reads (`trun run --dryrun --manifests`).
std::string FormatManifests(const Request& req);
// FormatManifests, after a comment when the workload is decided at submission.
std::string FormatRequest(const Request& req);

// TorchX's normalize_str: lower case, only [a-z0-9-], no leading '-'.
std::string Normalize(std::string_view s);
// A label value: characters outside [A-Za-z0-9-_.] become '.', it starts
// and ends with an alphanumeric (TorchX turns those ends into '.', which
// Kubernetes refuses), at most 63 characters.
std::string LabelValue(std::string_view s);
// A DNS-1123 label: [a-z0-9-], at most 63, alphanumeric at both ends.
bool IsDnsLabel(std::string_view s);

// TorchX's pod overlay (torchx.specs.overlays.apply_overlay): objects merge
// key by key, a list is appended to the list it meets, anything else
// replaces; the keys `__put__:F` replace F, `__del__:F` remove it, and
// `__join__:F:K` merge the list F item by item on the field K (a matching
// item's fields replace the base item's, others are appended). The JOIN
// keys' shapes are checked before (the role's overlay is refused otherwise).
void MergeOverlay(nlohmann::ordered_json& base, const nlohmann::json& overlay);

// The labels TorchX puts on a pod (torchx.pytorch.org/... and
// app.kubernetes.io/...), and the one `list` and `describe` select by.
inline constexpr std::string_view kLabelAppName = "torchx.pytorch.org/app-name";
inline constexpr std::string_view kLabelRoleIndex = "torchx.pytorch.org/role-index";
inline constexpr std::string_view kLabelRoleName = "torchx.pytorch.org/role-name";
inline constexpr std::string_view kLabelReplicaId = "torchx.pytorch.org/replica-id";
inline constexpr std::string_view kLabelVersion = "torchx.pytorch.org/version";
inline constexpr std::string_view kLabelKubeAppName = "app.kubernetes.io/name";
inline constexpr std::string_view kLabelManagedBy = "app.kubernetes.io/managed-by";
inline constexpr std::string_view kLabelInstance = "app.kubernetes.io/instance";
inline constexpr std::string_view kManagedBy = "torchx.pytorch.org";
// What tells `trun` which workload an object of `list` is.
inline constexpr std::string_view kLabelWorkload = "trun.pytorch.org/workload";
// On the top objects: the AppDef as JSON.
inline constexpr std::string_view kAnnotationAppDef = "trun.pytorch.org/app-def";
// Set by the Job controller on the pods of an Indexed Job.
inline constexpr std::string_view kLabelCompletionIndex =
    "batch.kubernetes.io/job-completion-index";

}  // namespace trun::schedulers::kube
