// KubernetesScheduler on a fake API server (KubeApi): what it makes of the
// objects and pods the server answers with, and what it asks the server to
// do. tests/integration/test_kubernetes_api.py runs the real client against
// a replaying server; these cover the scheduler's own logic.
#include "schedulers/kubernetes_scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "schedulers/kubernetes_manifests.h"
#include "specs/serialize.h"

namespace trun::schedulers {
namespace {

using nlohmann::json;
using specs::AppState;

// An API server that answers GETs from a table (404 for what it lacks) and
// accepts every POST, PATCH and DELETE, answering a POST with the object
// and a uid. Every request is recorded.
class FakeKubeApi final : public kube::KubeApi {
 public:
  struct Request {
    std::string method, path, body;
  };

  void Answer(const std::string& path, Result<json> reply) {
    gets_.insert_or_assign(path, std::move(reply));
  }

  const std::string& Namespace() const override { return ns_; }
  Result<json> Call(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& /*content_type*/) const override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back({method, path, body});
    if (method != "GET") {
      json obj = body.empty() ? json::object() : json::parse(body);
      if (method == "POST") obj["metadata"]["uid"] = "uid-1";
      return obj;
    }
    auto it = gets_.find(path);
    if (it == gets_.end()) {
      return Status::NotFound(fmt::format("GET {}: 404 not found", path)).WithHttpStatus(404);
    }
    return it->second;
  }
  Status Stream(const std::string& path,
                const std::function<bool(std::string_view)>& /*on_line*/) const override {
    return Status::Unsupported("the fake API server streams nothing: " + path);
  }

  // The requests other than GETs, as "METHOD path".
  std::vector<std::string> Changes() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& r : requests_) {
      if (r.method != "GET") out.push_back(r.method + " " + r.path);
    }
    return out;
  }
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  std::string ns_ = "ml";
  std::map<std::string, Result<json>> gets_;
  mutable std::mutex mu_;
  mutable std::vector<Request> requests_;
};

constexpr const char* kAppId = "ml:train-x1";
const std::string kVolcanoJob = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/train-x1";
const std::string kJobSet = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/train-x1";
const std::string kSelector =
    "?labelSelector=" + kube::UrlEncode(std::string(kube::kLabelInstance) + "=train-x1");
const std::string kJobs = "/apis/batch/v1/namespaces/ml/jobs" + kSelector;
const std::string kPods = "/api/v1/namespaces/ml/pods" + kSelector;

specs::Role Role(const std::string& name, int replicas) {
  specs::Role r;
  r.name = name;
  r.image = "ghcr.io/me/train:1";
  r.entrypoint = "python";
  r.args = {"train.py"};
  r.num_replicas = replicas;
  return r;
}

specs::AppDef App(int replicas) {
  specs::AppDef app;
  app.name = "train";
  app.roles = {Role("trainer", replicas)};
  return app;
}

json VolcanoJob(const std::string& phase, int retries = 0) {
  json j = {{"apiVersion", "batch.volcano.sh/v1alpha1"},
            {"kind", "Job"},
            {"metadata",
             {{"name", "train-x1"},
              {"annotations", {{"trun.pytorch.org/app-def", specs::ToJson(App(3)).dump()}}}}},
            {"status", {{"retryCount", retries}}}};
  if (!phase.empty()) j["status"]["state"]["phase"] = phase;
  return j;
}

// A pod of replica `replica` of role 0 ("trainer"), created at `created`;
// `terminated`: its main container's state.terminated, when it has ended.
json Pod(int replica, const std::string& phase, const std::string& created,
         json terminated = nullptr) {
  const std::string name = fmt::format("train-x1-trainer-{}", replica);
  json pod = {{"metadata",
               {{"name", name + "-" + created.substr(17, 2)},
                {"creationTimestamp", created},
                {"labels",
                 {{std::string(kube::kLabelRoleIndex), "0"},
                  {std::string(kube::kLabelRoleName), "trainer"},
                  {std::string(kube::kLabelReplicaId), std::to_string(replica)}}}}},
              {"spec",
               {{"hostname", name},
                {"subdomain", "train-x1"},
                {"containers", json::array({{{"name", "trainer"}}})}}},
              {"status", {{"phase", phase}, {"podIP", "10.0.0.9"}}}};
  if (!terminated.is_null()) {
    pod["status"]["containerStatuses"] = json::array(
        {{{"name", "sidecar"}, {"state", {{"terminated", {{"message", "not the main one"}}}}}},
         {{"name", "trainer"}, {"state", {{"terminated", terminated}}}}});
  }
  return pod;
}

json Items(std::vector<json> items) { return {{"items", items}}; }

DescribeAppResponse Describe(FakeKubeApi& api) {
  auto fake = std::shared_ptr<FakeKubeApi>(&api, [](FakeKubeApi*) {});
  KubernetesScheduler sched("s", fake);
  auto d = sched.Describe(kAppId);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : DescribeAppResponse{};
}

TEST(KubernetesSchedulerFake, VolcanoPhasesAreTorchXsStates) {
  const std::vector<std::pair<std::string, AppState>> cases = {{"", AppState::kPending},
                                                               {"Pending", AppState::kPending},
                                                               {"Running", AppState::kRunning},
                                                               {"Restarting", AppState::kRunning},
                                                               {"Completed", AppState::kSucceeded},
                                                               {"Failed", AppState::kFailed},
                                                               {"Terminated", AppState::kFailed},
                                                               {"Aborted", AppState::kCancelled},
                                                               {"Bogus", AppState::kUnknown}};
  for (const auto& [phase, state] : cases) {
    FakeKubeApi api;
    api.Answer(kVolcanoJob, VolcanoJob(phase));
    api.Answer(kPods, Items({}));
    EXPECT_EQ(Describe(api).state, state) << "phase '" << phase << "'";
  }
}

TEST(KubernetesSchedulerFake, EachReplicaIsItsNewestPod) {
  FakeKubeApi api;
  api.Answer(kVolcanoJob, VolcanoJob("Pending", 1));
  // Replica 0 was retried: its failed pod is older than its running one.
  api.Answer(kPods, Items({Pod(0, "Running", "2026-11-26T12:00:20Z"),
                           Pod(0, "Failed", "2026-11-26T12:00:01Z", {{"exitCode", 1}}),
                           Pod(1, "Pending", "2026-11-26T12:00:21Z")}));
  DescribeAppResponse d = Describe(api);
  // A running pod makes a pending app RUNNING.
  EXPECT_EQ(d.state, AppState::kRunning);
  EXPECT_EQ(d.name, "train");
  EXPECT_EQ(d.num_restarts, 1);
  ASSERT_EQ(d.roles_statuses.size(), 1u);
  const auto& replicas = d.roles_statuses[0].replicas;
  ASSERT_EQ(replicas.size(), 3u);  // the AppDef's, with or without a pod
  EXPECT_EQ(replicas[0].state, AppState::kRunning);
  EXPECT_EQ(replicas[0].hostname, "train-x1-trainer-0.train-x1");
  EXPECT_EQ(replicas[0].role, "trainer");
  EXPECT_EQ(replicas[1].state, AppState::kPending);
  EXPECT_EQ(replicas[2].state, AppState::kPending);
  EXPECT_EQ(replicas[2].hostname, "");
  EXPECT_EQ(d.structured_error_msg, specs::kNone);
}

TEST(KubernetesSchedulerFake, RootCauseIsTheEarliestFailedPod) {
  FakeKubeApi api;
  api.Answer(kVolcanoJob, VolcanoJob("Failed"));
  // Replica 1's container ended first; replica 2's error file dates its
  // failure earlier still, though its container ended last.
  const std::string error_file =
      R"({"message": {"message": "ValueError: boom", "extraInfo": {"timestamp": "1795000000"}}})";
  api.Answer(
      kPods,
      Items({Pod(0, "Failed", "2026-11-26T12:00:00Z",
                 {{"exitCode", 1}, {"message", "late"}, {"finishedAt", "2026-11-26T12:05:00Z"}}),
             Pod(1, "Failed", "2026-11-26T12:00:00Z",
                 {{"exitCode", 137},
                  {"reason", "OOMKilled"},
                  {"finishedAt", "2026-11-26T12:01:00Z"}}),
             Pod(2, "Running", "2026-11-26T12:00:00Z")}));
  DescribeAppResponse d = Describe(api);
  EXPECT_EQ(d.state, AppState::kFailed);
  const auto& replicas = d.roles_statuses[0].replicas;
  EXPECT_EQ(replicas[0].structured_error_msg, "late");
  EXPECT_EQ(replicas[1].structured_error_msg, "container trainer exited with code 137 (OOMKilled)");
  EXPECT_EQ(d.structured_error_msg, "container trainer exited with code 137 (OOMKilled)");

  api.Answer(kPods, Items({Pod(0, "Failed", "2026-11-26T12:00:00Z",
                               {{"exitCode", 1}, {"finishedAt", "2026-11-26T12:01:00Z"}}),
                           Pod(2, "Failed", "2026-11-26T12:00:00Z",
                               {{"exitCode", 1},
                                {"message", error_file},
                                {"finishedAt", "2026-11-26T12:09:00Z"}})}));
  d = Describe(api);
  EXPECT_EQ(d.structured_error_msg, error_file);
  EXPECT_EQ(d.roles_statuses[0].replicas[1].state, AppState::kPending);
}

TEST(KubernetesSchedulerFake, JobSetAndJobsStates) {
  FakeKubeApi api;
  json jobset = {
      {"kind", "JobSet"},
      {"metadata", {{"name", "train-x1"}}},
      {"status",
       {{"restarts", 2},
        {"conditions",
         json::array({{{"type", "Failed"}, {"status", "True"}, {"message", "jobset failed"}}})}}}};
  api.Answer(kJobSet, jobset);
  api.Answer(kPods, Items({}));
  DescribeAppResponse d = Describe(api);
  EXPECT_EQ(d.state, AppState::kFailed);
  EXPECT_EQ(d.msg, "jobset failed");
  EXPECT_EQ(d.num_restarts, 2);
  // No AppDef annotation: the name is the app id's, the roles the pods'.
  EXPECT_EQ(d.name, "train-x1");
  EXPECT_TRUE(d.roles_statuses.empty());

  FakeKubeApi jobs_api;
  auto job = [](const std::string& name, const char* condition, int ready) {
    json j = {{"metadata", {{"name", name}}}, {"status", {{"ready", ready}, {"failed", 1}}}};
    if (condition) {
      j["status"]["conditions"] = json::array({{{"type", condition}, {"status", "True"}}});
    }
    return j;
  };
  jobs_api.Answer(kJobs, Items({job("train-x1-b", nullptr, 1), job("train-x1-a", "Complete", 0)}));
  jobs_api.Answer(kPods, Items({Pod(1, "Running", "2026-11-26T12:00:00Z")}));
  d = Describe(jobs_api);
  EXPECT_EQ(d.state, AppState::kRunning);
  EXPECT_EQ(d.num_restarts, 2);  // the Jobs' failed pods
  ASSERT_EQ(d.roles_statuses.size(), 1u);
  EXPECT_EQ(d.roles_statuses[0].role, "trainer");
  ASSERT_EQ(d.roles_statuses[0].replicas.size(), 2u);
  EXPECT_EQ(d.roles_statuses[0].replicas[1].state, AppState::kRunning);

  jobs_api.Answer(kJobs,
                  Items({job("train-x1-a", "Complete", 0), job("train-x1-b", "Complete", 0)}));
  EXPECT_EQ(Describe(jobs_api).state, AppState::kSucceeded);

  FakeKubeApi none;
  none.Answer(kJobs, Items({}));
  KubernetesScheduler sched("s", std::shared_ptr<FakeKubeApi>(&none, [](FakeKubeApi*) {}));
  auto missing = sched.Describe(kAppId);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnknownApp);
}

// What cancel and delete remove of an app of Jobs (train-x1, one role).
const std::vector<std::string> kJobsAppDeletes = {
    "DELETE /apis/batch/v1/namespaces/ml/jobs/train-x1-trainer",
    "DELETE /api/v1/namespaces/ml/services/train-x1",
    "DELETE /api/v1/namespaces/ml/secrets/train-x1"};

TEST(KubernetesSchedulerFake, CancelAbortsVolcanoAndDeletesTheOthers) {
  auto cancel = [](FakeKubeApi& api, const std::string& app_id = kAppId) {
    KubernetesScheduler sched("s", std::shared_ptr<FakeKubeApi>(&api, [](FakeKubeApi*) {}));
    return sched.Cancel(app_id);
  };
  FakeKubeApi volcano;
  volcano.Answer(kVolcanoJob, VolcanoJob("Running"));
  ASSERT_TRUE(cancel(volcano).ok());
  EXPECT_EQ(volcano.Changes(), std::vector<std::string>{"PATCH " + kVolcanoJob + "/status"});
  EXPECT_EQ(json::parse(volcano.requests().back().body)["status"]["state"]["phase"], "Aborted");

  FakeKubeApi done;
  done.Answer(kVolcanoJob, VolcanoJob("Completed"));
  ASSERT_TRUE(cancel(done).ok());
  EXPECT_TRUE(done.Changes().empty()) << "a finished app is left as it is";

  FakeKubeApi jobset;
  jobset.Answer(kJobSet, json{{"kind", "JobSet"}, {"metadata", {{"name", "train-x1"}}}});
  ASSERT_TRUE(cancel(jobset).ok());
  EXPECT_EQ(jobset.Changes(),
            (std::vector<std::string>{"DELETE " + kJobSet,
                                      "DELETE /api/v1/namespaces/ml/secrets/train-x1"}));
  EXPECT_EQ(json::parse(jobset.requests().back().body)["propagationPolicy"], "Foreground");

  FakeKubeApi jobs;
  jobs.Answer(kJobs, Items({{{"metadata", {{"name", "train-x1-trainer"}}}}}));
  ASSERT_TRUE(cancel(jobs).ok());
  EXPECT_EQ(jobs.Changes(), kJobsAppDeletes);

  FakeKubeApi untouched;
  Status bad = cancel(untouched, "no-namespace");
  EXPECT_EQ(bad.code(), StatusCode::kUnknownApp);
  EXPECT_TRUE(untouched.requests().empty());
}

// TorchX's delete: the Volcano Job goes (not aborted), finished or not, with
// the job token's Secret; the other workloads' objects as cancel deletes them.
TEST(KubernetesSchedulerFake, DeleteRemovesTheObjectsWhateverTheirState) {
  auto del = [](FakeKubeApi& api) {
    KubernetesScheduler sched("s", std::shared_ptr<FakeKubeApi>(&api, [](FakeKubeApi*) {}));
    return sched.Delete(kAppId);
  };
  for (const char* phase : {"Running", "Completed"}) {
    SCOPED_TRACE(phase);
    FakeKubeApi volcano;
    volcano.Answer(kVolcanoJob, VolcanoJob(phase));
    ASSERT_TRUE(del(volcano).ok());
    EXPECT_EQ(volcano.Changes(),
              (std::vector<std::string>{"DELETE " + kVolcanoJob,
                                        "DELETE /api/v1/namespaces/ml/secrets/train-x1"}));
    EXPECT_EQ(json::parse(volcano.requests()[1].body)["propagationPolicy"], "Foreground");
  }

  FakeKubeApi jobs;
  json finished = {{"metadata", {{"name", "train-x1-trainer"}}}};
  finished["status"]["conditions"] = json::array({{{"type", "Complete"}, {"status", "True"}}});
  jobs.Answer(kJobs, Items({finished}));
  ASSERT_TRUE(del(jobs).ok());
  EXPECT_EQ(jobs.Changes(), kJobsAppDeletes);

  FakeKubeApi none;
  EXPECT_EQ(del(none).code(), StatusCode::kUnknownApp);
  EXPECT_TRUE(none.Changes().empty());
}

// workload=auto: a JobSet where the cluster has JobSet's API, else the same
// app as Jobs, under the name the dry run gave it.
TEST(KubernetesSchedulerFake, AutoModeChoosesByTheJobSetApi) {
  for (bool has_jobset : {true, false}) {
    SCOPED_TRACE(has_jobset ? "JobSet installed" : "no JobSet");
    FakeKubeApi api;
    if (has_jobset) api.Answer("/apis/jobset.x-k8s.io/v1alpha2", json::object());
    KubernetesScheduler sched("s", std::shared_ptr<FakeKubeApi>(&api, [](FakeKubeApi*) {}));
    auto info = sched.SubmitDryRun(
        App(2), {{"workload", std::string("auto")}, {"namespace", std::string("ml")}});
    ASSERT_TRUE(info.ok()) << info.status().message();
    const auto& req = std::get<kube::Request>(info->request);
    ASSERT_TRUE(req.auto_workload);
    EXPECT_EQ(req.name, req.base + "-" + req.unique);
    auto id = sched.Schedule(*info);
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_EQ(*id, req.AppId());

    // What was created (one Indexed Job per role), not the dry runs.
    std::vector<std::string> kinds;
    for (const auto& r : api.requests()) {
      if (r.method != "POST" || r.path.ends_with("?dryRun=All")) continue;
      json obj = json::parse(r.body);
      kinds.push_back(obj["kind"]);
      EXPECT_TRUE(obj["metadata"]["name"].get<std::string>().starts_with(req.name)) << r.body;
      EXPECT_EQ(obj["metadata"]["labels"][std::string(kube::kLabelInstance)], req.name);
    }
    if (has_jobset) {
      EXPECT_EQ(kinds, (std::vector<std::string>{"Secret", "JobSet"}));
    } else {
      EXPECT_EQ(kinds, (std::vector<std::string>{"Secret", "Service", "Job"}));
    }
  }
}

}  // namespace
}  // namespace trun::schedulers
