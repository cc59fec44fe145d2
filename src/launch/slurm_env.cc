#include "launch/slurm_env.h"

#include <fmt/format.h>

#include "common/hostlist.h"
#include "common/strings.h"

namespace trun::launch {

Result<std::map<std::string, std::string>> SlurmLaunchDefaults(const GetEnv& env) {
  std::map<std::string, std::string> d;
  const std::string job_id = env("SLURM_JOB_ID");
  if (job_id.empty() || env("SLURM_STEP_ID").empty()) return d;

  std::string nodes = env("SLURM_STEP_NUM_NODES");
  if (nodes.empty()) nodes = env("SLURM_NNODES");
  std::string list = env("SLURM_STEP_NODELIST");
  if (list.empty()) list = env("SLURM_JOB_NODELIST");
  auto n = ParseInt(nodes);
  auto rank = ParseInt(env("SLURM_NODEID"));
  auto hosts = list.empty() ? Result<std::vector<std::string>>(Status::InvalidArgument(
                                  "SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are unset"))
                            : ExpandHostlist(list);
  if (!n || *n < 1 || !rank || !hosts.ok() || hosts->empty()) {
    return Status::InvalidArgument(fmt::format(
        "inside SLURM job {} step {}, but SLURM's environment does not say how many nodes there "
        "are and which this is (SLURM_STEP_NUM_NODES='{}', SLURM_NODEID='{}', "
        "SLURM_STEP_NODELIST='{}'{}); give --nnodes, --node-rank and --rdzv-endpoint yourself",
        job_id, env("SLURM_STEP_ID"), nodes, env("SLURM_NODEID"), list,
        hosts.ok() ? "" : ": " + hosts.status().message()));
  }
  const std::string tasks = env("SLURM_STEP_NUM_TASKS");
  if (!tasks.empty() && tasks != nodes) {
    return Status::InvalidArgument(fmt::format(
        "srun started {} tasks on {} node(s), but trun starts each node's workers itself: run "
        "one task per node (srun --ntasks-per-node=1 trun --nproc-per-node N ...), or give "
        "--nnodes and the rendezvous flags yourself",
        tasks, nodes));
  }
  if (*n == 1) return d;
  const std::string host = hosts->front();
  const std::string port = std::to_string(15000 + ParseInt(job_id).value_or(0) % 10000);
  d["nnodes"] = nodes;
  d["node_rank"] = std::to_string(*rank);
  d["rdzv_id"] = job_id;
  d["rdzv_backend"] = "c10d";
  d["rdzv_endpoint"] = host + ":" + port;
  return d;
}

}  // namespace trun::launch
