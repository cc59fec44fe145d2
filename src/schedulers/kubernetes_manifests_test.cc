#include "schedulers/kubernetes_manifests.h"

#include <gtest/gtest.h>

#include "specs/serialize.h"

namespace trun::schedulers::kube {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

specs::Cfg Cfg(std::map<std::string, specs::CfgValue> given = {}) {
  auto cfg = KubernetesRunOpts().Resolve({}, "kubernetes");
  EXPECT_TRUE(cfg.ok());
  specs::Cfg c = *cfg;
  c["queue"] = std::string("default");
  for (auto& [k, v] : given) c[k] = v;
  return c;
}

specs::Role Role(const std::string& name, int replicas) {
  specs::Role r;
  r.name = name;
  r.image = "ghcr.io/me/train:1";
  r.entrypoint = "bash";
  r.args = {"-c",
            "/home/u/trun/build/trun --rdzv_endpoint ${${rank0_env}:=localhost}:29500 "
            "--rdzv_id ${app_id} --node_rank ${replica_id} train.py"};
  r.env = {{"LOGLEVEL", "INFO"}, {"POD_IP", "[FIELD_PATH]status.podIP"}};
  r.num_replicas = replicas;
  r.resource.cpu = 8;
  r.resource.gpu = 2;
  r.resource.mem_mb = 32768;
  return r;
}

Request Make(const specs::AppDef& app, const specs::Cfg& cfg) {
  auto req = MakeRequest(app, cfg, "bx2kq7mvf1sd", "/home/u/trun/build/trun");
  EXPECT_TRUE(req.ok()) << req.status().message();
  return req.ok() ? *req : Request{};
}

std::string Error(const specs::AppDef& app, const specs::Cfg& cfg) {
  auto req = MakeRequest(app, cfg, "bx2kq7mvf1sd", "/t");
  EXPECT_FALSE(req.ok());
  return req.ok() ? "" : req.status().message();
}

std::string EnvOf(const ordered_json& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : e.dump();
  }
  return "<unset>";
}

TEST(KubeNames, NormalizeAndLabelValuesAsTorchX) {
  EXPECT_EQ(Normalize("-My_Trainer.v2"), "mytrainerv2");
  EXPECT_EQ(Normalize("---"), "");
  EXPECT_EQ(LabelValue("my app!"), "my.app");
  EXPECT_EQ(LabelValue("_x_"), "x");
  EXPECT_EQ(LabelValue(std::string(70, 'a')).size(), 63u);
  EXPECT_TRUE(IsDnsLabel("kube-system"));
  EXPECT_FALSE(IsDnsLabel("Kube"));
  EXPECT_FALSE(IsDnsLabel("-a"));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
}

TEST(KubeManifests, VolcanoJobAsTorchXBuildsIt) {
  specs::Role worker = Role("worker", 1);
  worker.max_retries = 2;
  specs::AppDef app{"Train", {Role("trainer", 2), worker}, {}};
  Request req = Make(app, Cfg({{"priority_class", std::string("high")}}));
  EXPECT_EQ(req.name, "train-bx2kq7mvf1sd");
  EXPECT_EQ(req.AppId(), "default:train-bx2kq7mvf1sd");
  ASSERT_EQ(req.objects.size(), 2u);  // the job token's Secret, the Job
  const ordered_json& job = req.objects[1];
  EXPECT_EQ(job["apiVersion"], "batch.volcano.sh/v1alpha1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(job["spec"]["queue"], "default");
  EXPECT_EQ(job["spec"]["maxRetry"], 0);
  EXPECT_EQ(job["spec"]["priorityClassName"], "high");
  EXPECT_EQ(job["spec"]["plugins"]["svc"][0], "--publish-not-ready-addresses");
  const auto& tasks = job["spec"]["tasks"];
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0]["name"], "trainer-0");
  EXPECT_EQ(tasks[2]["name"], "worker-0");
  EXPECT_EQ(tasks[2]["maxRetry"], 2);
  EXPECT_EQ(tasks[2]["policies"][1]["action"], "RestartJob");

  const auto& pod0 = tasks[0]["template"];
  const auto& c0 = pod0["spec"]["containers"][0];
  EXPECT_EQ(c0["image"], "ghcr.io/me/train:1");
  EXPECT_EQ(c0["command"][0], "bash");
  // The submitter's trun became the pods' trun; replica 0 hosts the rendezvous.
  EXPECT_EQ(c0["command"][2],
            "trun --rdzv_endpoint ${TORCHX_RANK0_HOST:=localhost}:29500 --rdzv_id "
            "train-bx2kq7mvf1sd --node_rank 0 train.py");
  EXPECT_EQ(EnvOf(c0, "TORCHX_RANK0_HOST"), "localhost");
  const auto& c1 = tasks[1]["template"]["spec"]["containers"][0];
  EXPECT_NE(c1["command"][2].get<std::string>().find("${VC_TRAINER_0_HOSTS:=localhost}"),
            std::string::npos);
  EXPECT_EQ(EnvOf(c1, "PET_NODE_RANK"), "1");
  EXPECT_EQ(EnvOf(c1, "PET_MASTER_ADDR"), "train-bx2kq7mvf1sd-trainer-0-0.train-bx2kq7mvf1sd");
  EXPECT_EQ(EnvOf(c1, "TORCHELASTIC_ERROR_FILE"), "/dev/termination-log");
  EXPECT_EQ(EnvOf(c1, "POD_IP"),
            R"({"name":"POD_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}})");
  // Resources: limits as asked, requests lowered by the reserve.
  EXPECT_EQ(c0["resources"]["limits"]["cpu"], "8000m");
  EXPECT_EQ(c0["resources"]["requests"]["cpu"], "7900m");
  EXPECT_EQ(c0["resources"]["limits"]["memory"], "32768M");
  EXPECT_EQ(c0["resources"]["requests"]["memory"], "31744M");
  EXPECT_EQ(c0["resources"]["limits"]["nvidia.com/gpu"], "2");
  EXPECT_EQ(pod0["metadata"]["labels"]["torchx.pytorch.org/replica-id"], "0");
  EXPECT_EQ(pod0["metadata"]["labels"]["torchx.pytorch.org/role-name"], "trainer");
  EXPECT_EQ(pod0["metadata"]["labels"]["app.kubernetes.io/instance"], "train-bx2kq7mvf1sd");
  EXPECT_EQ(pod0["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
  EXPECT_EQ(pod0["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod0["spec"]["volumes"][0]["emptyDir"]["medium"], "Memory");
  // The AppDef rides along for `describe`.
  auto def =
      json::parse(job["metadata"]["annotations"]["trun.pytorch.org/app-def"].get<std::string>());
  EXPECT_EQ(def["name"], "Train");
}

TEST(KubeManifests, JobSetHasAReplicatedJobPerRole) {
  specs::AppDef app{"train", {Role("trainer", 3)}, {}};
  Request req =
      Make(app, Cfg({{"workload", std::string("jobset")}, {"kueue_queue", std::string("team-a")}}));
  ASSERT_EQ(req.objects.size(), 2u);
  const auto& js = req.objects[1];
  EXPECT_EQ(js["apiVersion"], "jobset.x-k8s.io/v1alpha2");
  EXPECT_EQ(js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  const auto& rj = js["spec"]["replicatedJobs"][0];
  EXPECT_EQ(rj["name"], "trainer");
  EXPECT_EQ(rj["template"]["spec"]["completions"], 3);
  EXPECT_EQ(rj["template"]["spec"]["completionMode"], "Indexed");
  const auto& c = rj["template"]["spec"]["template"]["spec"]["containers"][0];
  // Waits for replica 0's name, then runs the role with its index.
  EXPECT_EQ(c["command"][0], "sh");
  EXPECT_EQ(c["command"][4], "bash");
  EXPECT_NE(c["command"][6].get<std::string>().find("--node_rank $(TRUN_REPLICA_ID)"),
            std::string::npos);
  EXPECT_EQ(EnvOf(c, "TORCHX_RANK0_HOST"), "train-bx2kq7mvf1sd-trainer-0-0.train-bx2kq7mvf1sd");
  EXPECT_EQ(c["env"][0]["name"], "TRUN_REPLICA_ID");
}

TEST(KubeManifests, AutoIsAJobSetThatSaysSo) {
  specs::AppDef app{"train", {Role("trainer", 2)}, {}};
  Request req = Make(app, Cfg({{"workload", std::string("auto")}}));
  EXPECT_TRUE(req.auto_workload);
  EXPECT_EQ(req.objects[1]["kind"], "JobSet");
  EXPECT_EQ(FormatRequest(req).rfind("# workload=auto", 0), 0u);
  EXPECT_EQ(req.ToJson()["auto"], true);
  // Submission may make it again as Jobs, under the same name.
  EXPECT_EQ(req.base, "train");
  EXPECT_EQ(req.unique, "bx2kq7mvf1sd");
  EXPECT_EQ(req.name, req.base + "-" + req.unique);
}

TEST(KubeManifests, PlainJobsShareAHeadlessService) {
  specs::AppDef app{"train", {Role("trainer", 2), Role("ps", 1)}, {}};
  Request req = Make(app, Cfg({{"workload", std::string("job")}}));
  ASSERT_EQ(req.objects.size(), 4u);
  EXPECT_EQ(req.objects[0]["kind"], "Secret");
  EXPECT_EQ(req.objects[1]["kind"], "Service");
  EXPECT_EQ(req.objects[1]["spec"]["clusterIP"], "None");
  EXPECT_EQ(req.objects[2]["metadata"]["name"], "train-bx2kq7mvf1sd-trainer");
  EXPECT_EQ(req.objects[3]["metadata"]["name"], "train-bx2kq7mvf1sd-ps");
  const auto& spec = req.objects[2]["spec"];
  EXPECT_EQ(spec["template"]["spec"]["subdomain"], "train-bx2kq7mvf1sd");
  EXPECT_EQ(spec["backoffLimitPerIndex"], 0);
  EXPECT_EQ(EnvOf(spec["template"]["spec"]["containers"][0], "TORCHX_RANK0_HOST"),
            "train-bx2kq7mvf1sd-trainer-0.train-bx2kq7mvf1sd");
}

TEST(KubeManifests, MountsSelectorsTolerationsOverlayAndTrunImage) {
  specs::Role r = Role("trainer", 1);
  r.mounts = {{specs::MountType::kBind, "/data", "/data", true, "rwm"},
              {specs::MountType::kVolume, "my-claim", "/ckpt", false, "rwm"},
              {specs::MountType::kDevice, "/dev/fuse", "/dev/fuse", false, "r"}};
  r.metadata["kubernetes"] = {
      {"spec",
       {{"hostNetwork", true}, {"volumes", {{{"name", "x"}, {"emptyDir", json::object()}}}}}}};
  specs::AppDef app{"train", {r}, {}};
  Request req = Make(
      app, Cfg({{"node_selector", std::map<std::string, std::string>{{"gpu", "a100"}}},
                {"tolerations", std::vector<std::string>{"nvidia.com/gpu:NoSchedule", "spot=true"}},
                {"trun_image", std::string("ghcr.io/me/trun:0.1")},
                {"service_account", std::string("trainer")}}));
  const auto& spec = req.objects[1]["spec"]["tasks"][0]["template"]["spec"];
  EXPECT_EQ(spec["volumes"][1]["hostPath"]["path"], "/data");
  EXPECT_EQ(spec["volumes"][2]["persistentVolumeClaim"]["claimName"], "my-claim");
  EXPECT_EQ(spec["volumes"][3]["hostPath"]["path"], "/dev/fuse");
  EXPECT_EQ(spec["volumes"].back()["name"], "x");  // the overlay's list was appended
  EXPECT_EQ(spec["hostNetwork"], true);
  const auto& c = spec["containers"][0];
  EXPECT_EQ(c["securityContext"]["privileged"], true);
  EXPECT_EQ(c["volumeMounts"][1]["readOnly"], true);
  EXPECT_EQ(c["volumeMounts"][3]["readOnly"], true);  // a device without w or m
  EXPECT_EQ(spec["nodeSelector"]["gpu"], "a100");
  EXPECT_EQ(spec["tolerations"][0]["operator"], "Exists");
  EXPECT_EQ(spec["tolerations"][0]["effect"], "NoSchedule");
  EXPECT_EQ(spec["tolerations"][1]["value"], "true");
  EXPECT_EQ(spec["serviceAccountName"], "trainer");
  EXPECT_EQ(spec["initContainers"][0]["image"], "ghcr.io/me/trun:0.1");
  EXPECT_NE(c["command"][2].get<std::string>().find("/opt/trun/bin/trun --rdzv"),
            std::string::npos);
}

TEST(KubeManifests, BadInputIsEveryProblemAtOnce) {
  specs::Role big = Role("trainer", 1);
  big.resource.gpu = 16;
  big.resource.capabilities["node.kubernetes.io/instance-type"] = "p4d.24xlarge";
  specs::Role dup = Role("Trainer", 1);
  specs::AppDef app{"train", {big, dup}, {}};
  std::string e = Error(app, Cfg({{"namespace", std::string("Bad_NS")},
                                  {"tolerations", std::vector<std::string>{"k:Sometimes"}}}));
  EXPECT_NE(e.find("-cfg namespace=Bad_NS: a namespace is a DNS label"), std::string::npos) << e;
  EXPECT_NE(e.find("role 'trainer': cannot fit on a p4d.24xlarge node, which its resource asks "
                   "for: gpu=16 (it has 8)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("same Kubernetes name 'trainer'"), std::string::npos) << e;
  EXPECT_NE(e.find("NoSchedule, PreferNoSchedule or NoExecute"), std::string::npos) << e;

  specs::AppDef long_name{std::string(50, 'a'), {Role("trainer", 1)}, {}};
  e = Error(long_name, Cfg());
  EXPECT_NE(e.find("characters long, and Kubernetes allows 63"), std::string::npos) << e;

  specs::Cfg no_queue = Cfg();
  no_queue["queue"] = std::monostate{};
  e = Error(specs::AppDef{"t", {Role("r", 1)}, {}}, no_queue);
  EXPECT_NE(e.find("needs a Volcano queue"), std::string::npos) << e;

  e = Error(specs::AppDef{"t", {Role("r", 1)}, {}}, Cfg({{"workload", std::string("mpi")}}));
  EXPECT_NE(e.find("expected volcano, jobset, job or auto"), std::string::npos) << e;
}

TEST(KubeManifests, RequestAsJsonAndAsYaml) {
  specs::AppDef app{"train", {Role("trainer", 2)}, {}};
  Request req =
      Make(app, Cfg({{"workload", std::string("job")}, {"namespace", std::string("ml")}}));
  EXPECT_EQ(req.AppId(), "ml:train-bx2kq7mvf1sd");
  ordered_json j = req.ToJson();
  EXPECT_EQ(j["namespace"], "ml");
  EXPECT_EQ(j["name"], "train-bx2kq7mvf1sd");
  EXPECT_EQ(j["workload"], "job");
  EXPECT_EQ(j["objects"].size(), 3u);  // the Secret, the Service and one Job
  // YAML documents that read back as the objects.
  std::string yaml = FormatRequest(req);
  EXPECT_EQ(yaml.rfind("---\n", 0), 0u);
  auto first = specs::ParseYaml(yaml.substr(4, yaml.find("\n---\n") - 3));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ((*first)["kind"], "Secret");
}

// The containers of a request's pods: those that run the role, or (`init`)
// the init containers that copy trun.
std::vector<ordered_json> Containers(const Request& req, bool init = false) {
  std::vector<ordered_json> out;
  for (const auto& obj : req.objects) {
    std::vector<ordered_json> pods;
    if (obj["kind"] == "Job" && obj["apiVersion"] == "batch.volcano.sh/v1alpha1") {
      for (const auto& t : obj["spec"]["tasks"]) pods.push_back(t["template"]);
    } else if (obj["kind"] == "JobSet") {
      for (const auto& r : obj["spec"]["replicatedJobs"]) {
        pods.push_back(r["template"]["spec"]["template"]);
      }
    } else if (obj["kind"] == "Job") {
      pods.push_back(obj["spec"]["template"]);
    }
    for (const auto& p : pods) {
      for (const auto& c :
           p["spec"].value(init ? "initContainers" : "containers", ordered_json::array())) {
        out.push_back(c);
      }
    }
  }
  return out;
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(KubeManifests, TheJobTokenIsASecretEveryRoleContainerReads) {
  for (const std::string workload : {"volcano", "jobset", "job"}) {
    SCOPED_TRACE(workload);
    specs::AppDef app{"train", {Role("trainer", 2), Role("ps", 1)}, {}};
    Request req = Make(app, Cfg({{"workload", workload},
                                 {"trun_image", std::string("ghcr.io/me/trun:0.1")},
                                 {"kueue_queue", std::string("team-a")}}));
    ASSERT_GE(req.objects.size(), 2u);
    const ordered_json& secret = req.objects[0];
    EXPECT_EQ(secret["apiVersion"], "v1");
    EXPECT_EQ(secret["kind"], "Secret");
    EXPECT_EQ(secret["type"], "Opaque");
    EXPECT_EQ(secret["metadata"]["name"], req.name);
    EXPECT_EQ(secret["metadata"]["namespace"], "default");
    EXPECT_EQ(secret["metadata"]["labels"]["app.kubernetes.io/instance"], req.name);
    EXPECT_EQ(secret["metadata"]["labels"]["trun.pytorch.org/workload"], workload);
    EXPECT_FALSE(secret["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name"));
    EXPECT_FALSE(secret["metadata"].contains("annotations"));
    ASSERT_EQ(secret["stringData"].size(), 1u);
    const std::string token = secret["stringData"]["job-token"].get<std::string>();
    EXPECT_EQ(token.size(), 64u);  // a fresh one: 32 random bytes, hex
    const auto containers = Containers(req);
    ASSERT_EQ(containers.size(), workload == "volcano" ? 3u : 2u);
    const std::string ref = R"({"name":"TRUN_JOB_TOKEN","valueFrom":{"secretKeyRef":{"name":")" +
                            req.name + R"(","key":"job-token"}}})";
    for (const auto& c : containers) EXPECT_EQ(EnvOf(c, "TRUN_JOB_TOKEN"), ref);
    // Only the Secret holds it: not the pods, the init container, the
    // annotations or any other object.
    const std::string all = req.ToJson().dump();
    EXPECT_EQ(Occurrences(all, token), 1u);
    EXPECT_EQ(Occurrences(FormatRequest(req), token), 1u);
    for (size_t i = 1; i < req.objects.size(); ++i) {
      EXPECT_EQ(req.objects[i].dump().find(token), std::string::npos);
    }
    const auto inits = Containers(req, /*init=*/true);
    EXPECT_EQ(inits.size(), containers.size());
    for (const auto& c : inits) EXPECT_EQ(c.dump().find("TRUN_JOB_TOKEN"), std::string::npos);
  }
}

TEST(KubeManifests, SetJobTokenReplacesTheStandIn) {
  specs::AppDef app{"train", {Role("trainer", 2)}, {}};
  Request req = Make(app, Cfg());
  Request other = Make(app, Cfg());
  const std::string fresh = req.objects[0]["stringData"]["job-token"].get<std::string>();
  EXPECT_NE(fresh, other.objects[0]["stringData"]["job-token"].get<std::string>());
  const std::string given = "the-submitters-token-0123456789";
  ASSERT_TRUE(SetJobToken(req, given));
  EXPECT_EQ(req.objects[0]["stringData"]["job-token"], given);
  const std::string all = req.ToJson().dump();
  EXPECT_EQ(Occurrences(all, given), 1u);
  EXPECT_EQ(all.find(fresh), std::string::npos);
  // A request without the Secret (a record from before it) is left alone.
  Request old = req;
  old.objects.erase(old.objects.begin());
  EXPECT_FALSE(SetJobToken(old, given));
  EXPECT_EQ(old.ToJson().dump().find(given), std::string::npos);
}

TEST(KubeManifests, MergeOverlayUpsertsAndAppends) {
  ordered_json base = {{"a", {{"b", 1}, {"l", {1}}}}, {"c", "x"}};
  MergeOverlay(base, json{{"a", {{"l", {2}}, {"d", true}}}, {"c", "y"}});
  EXPECT_EQ(base.dump(), R"({"a":{"b":1,"l":[1,2],"d":true},"c":"y"})");
}

TEST(KubeManifests, MergeOverlayTakesTorchXsOperators) {
  ordered_json base = {{"spec",
                        {{"containers", {{{"name", "main"}, {"image", "v1"}}}},
                         {"volumes", {{{"name", "old"}}}},
                         {"hostNetwork", true}}}};
  MergeOverlay(base, json::parse(R"({"spec": {
      "__join__:containers:name": [{"name": "main", "livenessProbe": {"path": "/health"}},
                                   {"name": "side", "image": "proxy"},
                                   {"name": "main", "cpu": "1"}],
      "__put__:volumes": [{"name": "data"}],
      "__del__:hostNetwork": null}})"));
  EXPECT_EQ(
      base.dump(),
      R"({"spec":{"containers":[{"name":"main","image":"v1","livenessProbe":{"path":)"
      R"("/health"},"cpu":"1"},{"image":"proxy","name":"side"}],"volumes":[{"name":"data"}]}})");
}

TEST(KubeManifests, SetOverlaysV1PodKindIsThePodsOverlay) {
  // What trun.specs.overlays.set_overlay(role, "kubernetes", "V1Pod", ...) stores.
  specs::Role r = Role("trainer", 1);
  r.metadata["kubernetes"] = json::parse(R"({"__torchx_overlays__": true,
      "V1Pod": {"spec": {"nodeSelector": {"gpu": "a100"}, "__put__:tolerations": []}}})");
  Request req = Make(specs::AppDef{"train", {r}, {}},
                     Cfg({{"tolerations", std::vector<std::string>{"spot=true"}}}));
  const auto& spec = req.objects[1]["spec"]["tasks"][0]["template"]["spec"];
  EXPECT_EQ(spec["nodeSelector"]["gpu"], "a100");
  EXPECT_EQ(spec["tolerations"], ordered_json::array());
  EXPECT_FALSE(spec.contains("V1Pod"));
  EXPECT_FALSE(req.objects[1]["spec"]["tasks"][0]["template"].contains("__torchx_overlays__"));

  // Another kind only: nothing for the pod.
  r.metadata["kubernetes"] = json::parse(R"({"__torchx_overlays__": true, "Other": {"x": 1}})");
  req = Make(specs::AppDef{"train", {r}, {}}, Cfg());
  EXPECT_FALSE(req.objects[1]["spec"]["tasks"][0]["template"].contains("Other"));

  r.metadata["kubernetes"] = json::parse(R"({"__torchx_overlays__": true,
      "V1Pod": {"spec": {"__join__:containers": [{"name": "x"}], "__join__:volumes:name": {}}}})");
  std::string e = Error(specs::AppDef{"train", {r}, {}}, Cfg());
  EXPECT_NE(e.find("role 'trainer': metadata kubernetes: spec.__join__:containers: a JOIN key "
                   "needs the field to match items on; write JOIN(\"containers\", on=\"name\")"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("spec.__join__:volumes:name: JOIN needs a list of objects, got {}"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace trun::schedulers::kube
