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
//   static instead (--rdzv-backend static given): --master-addr and
//                   --master-port are that host and port.
//
// Only inside a job step (SLURM_JOB_ID and SLURM_STEP_ID set): trun in the
// batch script itself, or in an salloc shell, runs on one node and gets
// nothing. Flags and PET_ variables the user gave win over every default.
// More than one task per node (srun's default for --ntasks > nodes) would
// start several agents per node: that is an error naming the fix, unless
// the user gave --nnodes.
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
// "rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr",
// "master_port"); empty outside a SLURM job step. `backend` is the
// backend the user chose, empty when none. `nnodes_given` says whether
// --nnodes (or PET_NNODES) was given.
Result<std::map<std::string, std::string>> SlurmLaunchDefaults(const GetEnv& env,
                                                               const std::string& backend,
                                                               bool nnodes_given);

}  // namespace trun::launch
