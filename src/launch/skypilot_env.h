// trun started in a SkyPilot task's `run` section on each node of a
// multi-node cluster (`trun train.py`): the defaults that make the nodes one
// job with no further flags, read from the variables SkyPilot exports there
// (docs.skypilot.co, "Environment Variables and Secrets", SkyPilot native
// environment variables):
//
//   --nnodes          SKYPILOT_NUM_NODES (else the lines of SKYPILOT_NODE_IPS)
//   --node-rank       SKYPILOT_NODE_RANK (the head node is 0)
//   --nproc-per-node  SKYPILOT_NUM_GPUS_PER_NODE, when above 0
//   --rdzv-backend    c10d
//   --rdzv-endpoint   the head node, the first line of SKYPILOT_NODE_IPS, and a
//                     port from 20000-29999 picked by the task id, so two
//                     tasks on one cluster do not share a port
//   --rdzv-id         SKYPILOT_TASK_ID (else "skypilot")
//
// Only where SKYPILOT_NODE_IPS and SKYPILOT_NODE_RANK are both set. A task
// of one node gets --nproc-per-node alone and runs as torchrun would, an
// implied standalone job (a free port and a run id of its own, so two trun
// in one task never meet). As for SLURM (slurm_env.h), the caller asks only
// when the user made no rendezvous choice, and the user's --nproc-per-node
// and --rdzv-id win.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "launch/slurm_env.h"

namespace trun::launch {

// The defaults, keyed by torchrun's option dest; empty outside SkyPilot.
Result<std::map<std::string, std::string>> SkyPilotLaunchDefaults(const GetEnv& env);

}  // namespace trun::launch
