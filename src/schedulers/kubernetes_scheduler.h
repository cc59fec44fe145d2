// The `kubernetes` scheduler: an app is a Volcano Job, a JobSet, or Indexed
// Jobs with a headless Service (kubernetes_manifests.h builds them), created
// through the API server's REST interface (kubernetes_client.h) with the
// user's kubeconfig.
//
// The app id is NAMESPACE:NAME, as TorchX's (the handle is
// kubernetes://SESSION/NAMESPACE:NAME). The cluster keeps everything trun
// needs to answer later, from any machine: the top object carries the
// AppDef (annotation trun.pytorch.org/app-def) and its pods carry TorchX's
// labels, so trun keeps no record of its own.
//
// Status: the Volcano Job's phase (TorchX's table), or the conditions of the
// JobSet or Jobs; each replica is its newest pod (a retried replica has
// several). A failed app's structured error message is the earliest failed
// pod's termination message: the root cause trun's agent wrote to
// TORCHELASTIC_ERROR_FILE=/dev/termination-log, else the log's last lines.
// Cancel aborts a Volcano Job as TorchX does (status phase Aborted, the job
// kept for inspection) and deletes a JobSet or Jobs (with their pods:
// propagationPolicy Foreground). Delete is TorchX's too: it deletes the
// Volcano Job (or the JobSet, or the Jobs and their Service), running or
// not, and the job token's Secret. Log reads the replica's pod log, followed
// with --tail (follow=true, again after a retry replaced the pod).
//
// Thread-safety: as Scheduler; Log() may run on several threads.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "schedulers/kubernetes_client.h"
#include "schedulers/scheduler.h"

namespace trun::schedulers {

class KubernetesScheduler : public Scheduler {
 public:
  // `api` null: a KubeClient made from the kubeconfig when first needed
  // (tests give a fake).
  KubernetesScheduler(std::string session, std::shared_ptr<kube::KubeApi> api = nullptr);

  const specs::RunOpts& RunOpts() const override { return opts_; }
  Result<std::string> Schedule(const DryRunInfo& info) override;
  Result<DescribeAppResponse> Describe(const std::string& app_id) override;
  Status Log(const std::string& app_id, const std::string& role, int replica_id,
             const LogOptions& options,
             const std::function<bool(std::string_view)>& on_line) override;
  Status Cancel(const std::string& app_id) override;
  Status Delete(const std::string& app_id) override;
  Result<std::vector<ListAppResponse>> List() override;

 protected:
  Result<DryRunInfo> DryRun(const specs::AppDef& app, const specs::Cfg& cfg) override;

 private:
  Result<const kube::KubeApi*> Client();
  specs::RunOpts opts_;
  std::mutex mu_;  // guards client_
  std::shared_ptr<kube::KubeApi> client_;
};

}  // namespace trun::schedulers
