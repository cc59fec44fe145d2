// trun started by srun inside a SLURM allocation (`srun trun
// --nproc-per-node N train.py`, one task per node): the defaults that make
// the tasks one job with no further flags, read from SLURM's environment.
//
//   --nnodes        SLURM_STEP_NUM_NODES (else SLURM_NNODES)
//   --node-rank     SLURM_NODEID: the node's place in the step
//   --rdzv-backend  c10d
//   --rdzv-endpoint the step's first host (SLURM_STEP_NODELIST, else
//                   SLURM_JOB_NODELIST, expanded) and port 15000 + the job
//                   id's last four digits, so jobs that share a node do not
//                   share a port (PyTorch Lightning picks its MASTER_PORT so)
//   --rdzv-id       SLURM_JOB_ID
//
// Only inside a job step (SLURM_JOB_ID and SLURM_STEP_ID set) of more than
// one node: trun in the batch script itself, in an salloc shell, or in a
// one-node step runs as torchrun would, an implied standalone job (a free
// port and a run id of its own, so two such steps on a node never meet).
// The caller asks only when the user made no rendezvous choice (args.cc):
// any of --rdzv-backend, --rdzv-endpoint, --master-addr, --master-port,
// --node-rank, --nnodes means the user drives, as under torchrun.
// More than one task per node (srun's default for --ntasks > nodes) would
// start several agents per node: that is an error naming the fix.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace trun::launch {

// Looks up an environment variable; empty when unset.
using GetEnv = std::function<std::string(const char*)>;

// The defaults, keyed by torchrun's option dest ("nnodes", "node_rank",
// "rdzv_backend", "rdzv_endpoint", "rdzv_id"); empty outside a SLURM job
// step of several nodes.
Result<std::map<std::string, std::string>> SlurmLaunchDefaults(const GetEnv& env);

}  // namespace trun::launch
