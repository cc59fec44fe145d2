// The environment a worker starts with: torchrun's contract, as one pure
// function of the agent's own environment, the launch config, the round and
// the worker's place in it.
//
// What a worker gets, on top of the agent's environment (minus every
// variable below, so a stale value never leaks through, and minus the job
// token, TRUN_JOB_TOKEN, which is the agents' secret):
//   LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE
//   WORLD_SIZE GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT
//   TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID
//   TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_ERROR_FILE
//   TORCHELASTIC_SIGNALS_TO_HANDLE NCCL_ASYNC_ERROR_HANDLING and
//   TORCH_NCCL_ASYNC_ERROR_HANDLING (the agent's value, else 1)
//   OMP_NUM_THREADS=1 when trun set it; TORCHELASTIC_TIMER_FILE with the
//   watchdog; LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES=<its device> with
//   --virtual-local-rank.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "launch/config.h"

namespace trun::agent {

// Where a worker stands in the current round.
struct WorkerPlace {
  int local_rank = 0;
  int rank = 0;        // global
  int group_rank = 0;  // this node's
  int nodes = 1;       // in the round
  int world_size = 1;
  std::string master_addr;  // the workers' store
  int master_port = 0;
  int restart_count = 0;  // the round's number
  std::string error_file;
};

// `agent_env` is the agent's environment ("KEY=VALUE" each, as environ);
// `timer_file` is the watchdog's FIFO, "" when the watchdog is off.
std::vector<std::string> WorkerEnv(std::span<const std::string> agent_env,
                                   const launch::LaunchConfig& config,
                                   const std::string& timer_file, const WorkerPlace& place);

}  // namespace trun::agent
