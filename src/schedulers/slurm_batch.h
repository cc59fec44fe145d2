// The sbatch request the slurm scheduler submits for an AppDef: the sbatch
// command line and the batch script, built without asking SLURM anything
// (so `trun run --dryrun -s slurm` works anywhere).
//
// Two shapes (docs/design.md says why):
//
//   homogeneous    one role whose replicas are alike (their command and
//                  environment do not depend on ${replica_id}): one job of
//                  num_replicas nodes, one srun task per node; replica k is
//                  task k ($SLURM_PROCID), on the allocation's k-th node.
//                  ${rank0_env} is TORCHX_RANK0_HOST, which the script sets
//                  to the allocation's first host.
//   heterogeneous  anything else, as TorchX does it: one het-job component
//                  of one node per replica, named ROLE-K, all started by one
//                  srun with a ':'-separated group each. ${rank0_env} is
//                  SLURM_JOB_NODELIST_HET_GROUP_0.
//
// The job token (TRUN_JOB_TOKEN) reaches the agents of the roles that run
// trun's agent, and no environment that outlives their start: the script
// reads it from `job_token_file` into a shell variable (not exported) and
// removes the file, pipes it to srun, whose tasks of those roles read it
// from stdin in a `bash -c` that then execs the agent (a heterogeneous job
// gives each such component a pipe of its own, --input=<(...), as srun
// forwards its own stdin to the first component only); another role's
// tasks get no stdin (--input=none). Before a requeue the script writes the file
// again for the next attempt.
//
// Both: the job runs in `job_dir` (--chdir; the working directory of
// `trun run` when no job_dir is given), where each replica writes
// slurm-JOBID-ROLE-K.out and .err (appended to across requeues) and trun's
// agent writes the root cause of a failure to slurm-JOBID-ROLE-K.ATTEMPT.error.json
// (TORCHELASTIC_ERROR_FILE). The role's env reaches the replica through
// `env K=V ... ENTRYPOINT ARGS`, so values may hold commas (srun's
// --export=K=V cannot). ${app_id} becomes "$SLURM_JOB_ID", ${img_root} the
// job directory. A failed attempt requeues the job (`scontrol requeue`)
// while SLURM_RESTART_COUNT is below the smallest max_retries of the roles:
// SLURM restarts the whole job, so every retry_policy acts as APPLICATION.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "specs/app.h"
#include "specs/runopts.h"

namespace trun::schedulers::slurm {

struct BatchRequest {
  // Names the submission before SLURM gives it a job id: the script's path
  // holds it, so a job whose sbatch was cut off can be found again.
  std::string token;
  std::string script_path;
  // sbatch's arguments, without the script: --parsable, the job-wide
  // options, --chdir=job_dir.
  std::vector<std::string> sbatch_args;
  std::string job_dir;  // absolute
  bool heterogeneous = false;
  int max_retries = 0;
  std::vector<std::pair<std::string, int>> roles;  // name, replicas, in order
  // Where `trun run` leaves the job token (0600) for the script, which reads
  // and removes it; "" when no role runs trun's agent (specs::RunsTrunsAgent).
  std::string job_token_file;
  std::string script;

  nlohmann::ordered_json ToJson() const;
  static Result<BatchRequest> FromJson(const nlohmann::json& j);
};

// The request for `app` under the resolved run config `cfg`; the script
// goes to `record_dir`/sbatch.sh, and a relative job_dir is taken from
// `cwd`. Every problem (a role name SLURM files cannot hold, mounts, an
// option value with white space) at once.
Result<BatchRequest> MakeBatchRequest(const specs::AppDef& app, const specs::Cfg& cfg,
                                      const std::string& cwd, const std::string& token,
                                      const std::string& record_dir);

// What `--dryrun` prints: the sbatch command, then the script.
std::string FormatBatchRequest(const BatchRequest& req);

// slurm-JOBID-ROLE-K.out (or .err) in `job_dir`.
std::string LogFile(const std::string& job_dir, const std::string& job_id, const std::string& role,
                    int replica, bool stderr_file);
// slurm-JOBID-ROLE-K.ATTEMPT.error.json in `job_dir`.
std::string ErrorFile(const std::string& job_dir, const std::string& job_id,
                      const std::string& role, int replica, int attempt);

}  // namespace trun::schedulers::slurm
