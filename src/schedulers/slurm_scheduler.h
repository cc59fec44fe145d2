// The `slurm` scheduler: an app is one SLURM batch job, submitted with
// sbatch (the request and script are slurm_batch.h's), answered for with
// squeue/scontrol/sacct (slurm_jobs.h), cancelled with scancel.
//
// The app id is SLURM's job id (the handle is slurm://SESSION/JOBID), as in
// TorchX. Besides what SLURM keeps, each submission leaves a record under
// $XDG_STATE_HOME/trun/slurm/JOBID/ (app.json, request.json, sbatch.sh), so
// `describe`, `log` and `list` know the app's roles and the job directory
// after SLURM has forgotten the job, and from any directory.
//
// Status asks, in turn: `squeue --json` (every field; jobs the controller
// still holds, finished ones included until MinJobAge); `scontrol -o show
// job` when squeue has no JSON support; `sacct` (the accounting database,
// else `sacct -c`, the job-completion file) once the controller has
// forgotten the job. A failed app's structured error message is the
// earliest root cause trun's agents wrote to the replicas' error files.
//
// Submitting is never repeated by trun, and a submission whose sbatch was
// cut off (a timeout, a lost answer) is looked for in the queue by its
// script's path, which names the submission: found, it is the app; not
// found, `run` says so and exits 1 (not 4), since the controller may still
// create it; `list` adopts it when it shows up.
//
// Every SLURM command runs with a timeout of $TRUN_SLURM_TIMEOUT seconds
// (default 60). Describe asks SLURM about an app at most once a second and
// answers callers that poll faster (`run --wait`) with the last answer:
// each answer costs the controller an RPC, shared by every user.
//
// Thread-safety: as Scheduler; Log() may run on several threads.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "schedulers/scheduler.h"

namespace trun::schedulers {

class SlurmScheduler : public Scheduler {
 public:
  explicit SlurmScheduler(std::string session);

  const specs::RunOpts& RunOpts() const override { return opts_; }
  Result<std::string> Schedule(const DryRunInfo& info) override;
  Result<DescribeAppResponse> Describe(const std::string& app_id) override;
  Status Log(const std::string& app_id, const std::string& role, int replica_id,
             const LogOptions& options,
             const std::function<bool(std::string_view)>& on_line) override;
  Status Cancel(const std::string& app_id) override;
  Result<std::vector<ListAppResponse>> List() override;
  // One step of srun in the app's allocation reads every node's workers
  // (slurm_stacks.h), within $TRUN_SLURM_TIMEOUT or 10 s, the less.
  Result<StacksAnswer> Stacks(const std::string& app_id) override;

 protected:
  Result<DryRunInfo> DryRun(const specs::AppDef& app, const specs::Cfg& cfg) override;

 private:
  specs::RunOpts opts_;
  std::mutex mu_;  // guards recent_
  std::map<std::string, std::pair<std::chrono::steady_clock::time_point, DescribeAppResponse>>
      recent_;
};

}  // namespace trun::schedulers
