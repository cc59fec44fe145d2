// `trun stack` of a SLURM app: a job step inside the app's own allocation
// reads the workers on each of its nodes, as the local scheduler reads them
// on its host (agent/stacks.h), and prints each node's document.
//
// The slurm scheduler runs one srun for the whole job (StackStepCommand):
// one task per node, sharing the job's resources (--overlap), each running
// the hidden `trun slurm-stack JOBID`, which prints its node's document
// (ReadNodeStacks) as one line of JSON. GatherStacks then takes one document
// per node from srun's output and names the nodes that printed none.
//
// On a node, the app's replicas are the tasks of the job's other steps:
// processes whose environment (as slurmstepd started them) carries this
// job's SLURM_JOB_ID, a SLURM_STEP_ID that is not this step's, and this
// node's SLURMD_NODENAME, and whose parent is none of them (StepTaskRoots).
// The node name matters where several slurmds share one host (a test
// cluster on loopback); the batch script is no task of a step (it has no
// SLURM_STEP_ID), nor is srun's client under it.
//
// Thread-safety: pure functions, except ReadNodeStacks, which reads /proc
// and this process's environment and is safe from any thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::schedulers::slurm {

// The hidden subcommand a step task runs.
inline constexpr const char* kStackSubcommand = "slurm-stack";

struct NodeProcess {
  pid_t pid = 0;
  pid_t ppid = 0;
  std::map<std::string, std::string> env;
};

// The processes of `procs` that are the tasks of job `job_id`'s steps on
// node `node`, the step `own_step` (the reader's) left out.
std::vector<pid_t> StepTaskRoots(const std::vector<NodeProcess>& procs, const std::string& job_id,
                                 const std::string& node, const std::string& own_step);

// This node's document of job `job_id` (agent/stacks.h): every worker below
// each task root, labelled with the node's name (SLURMD_NODENAME) and index
// in the job (SLURM_NODEID). InvalidArgument outside a step of that job.
Result<nlohmann::ordered_json> ReadNodeStacks(const std::string& job_id);

// The srun that runs `trun` (this program's path, the same on every node as
// for the job's own agents) once on every node of job `job_id`: `nodes`
// nodes, or for a heterogeneous job (`components` > 1) every component.
std::vector<std::string> StackStepCommand(const std::string& trun, const std::string& job_id,
                                          int nodes, int components);

struct GatheredStacks {
  std::vector<nlohmann::json> nodes;  // in the order of `expected`
  std::vector<std::string> missing;   // nodes of `expected` without a document
};

// The documents in srun's output (--label: lines "TASK: PIECE", a task's
// pieces joined making its one line of JSON), one per node (where two tasks
// ran on one node, the first; a task whose text is no document is skipped),
// and which `expected` nodes printed none.
GatheredStacks GatherStacks(std::string_view srun_out, const std::vector<std::string>& expected);

}  // namespace trun::schedulers::slurm
