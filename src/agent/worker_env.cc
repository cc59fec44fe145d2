#include "agent/worker_env.h"

#include <set>
#include <string_view>

#include "proc/signals.h"

namespace trun::agent {

std::vector<std::string> WorkerEnv(std::span<const std::string> agent_env,
                                   const launch::LaunchConfig& config,
                                   const std::string& timer_file, const WorkerPlace& place) {
  static const std::set<std::string, std::less<>> kOwn = {
      "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
      "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
      "TORCHELASTIC_USE_AGENT_STORE", "NCCL_ASYNC_ERROR_HANDLING",
      "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE",
      "TORCHELASTIC_SIGNALS_TO_HANDLE",
      // The agents' secret, not the workers'.
      "TRUN_JOB_TOKEN",
      // Where the agent's caller wants its reports: a trun a worker runs
      // must not write over them.
      "TRUN_FAILURE_JSON", "TRUN_ERROR_JSON"};
  std::vector<std::string> env;
  env.reserve(agent_env.size() + 24);
  std::string nccl_async = "1", torch_nccl_async = "1";
  for (const std::string& kv : agent_env) {
    std::string_view key = std::string_view(kv).substr(0, kv.find('='));
    std::string_view value =
        key.size() < kv.size() ? std::string_view(kv).substr(key.size() + 1) : std::string_view();
    if (key == "NCCL_ASYNC_ERROR_HANDLING") nccl_async = value;
    if (key == "TORCH_NCCL_ASYNC_ERROR_HANDLING") torch_nccl_async = value;
    if (kOwn.count(key) || (!timer_file.empty() && key == "TORCHELASTIC_TIMER_FILE") ||
        (config.virtual_local_rank && key == "CUDA_VISIBLE_DEVICES")) {
      continue;
    }
    env.push_back(kv);
  }
  if (config.set_omp_num_threads) env.push_back("OMP_NUM_THREADS=1");
  std::string signals;
  for (int sig : config.signals_to_handle) {
    signals += (signals.empty() ? "" : ",") + proc::SignalName(sig);
  }
  auto add = [&](std::string_view key, const std::string& value) {
    env.push_back(std::string(key) + "=" + value);
  };
  add("ROLE_NAME", config.role);
  add("LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node));
  add("TORCHELASTIC_MAX_RESTARTS", std::to_string(config.max_restarts));
  add("TORCHELASTIC_RUN_ID", config.rdzv_id);
  // Every rank, rank 0 too, is a client of the agent's store.
  add("TORCHELASTIC_USE_AGENT_STORE", "True");
  add("NCCL_ASYNC_ERROR_HANDLING", nccl_async);
  add("TORCH_NCCL_ASYNC_ERROR_HANDLING", torch_nccl_async);
  add("TORCHELASTIC_SIGNALS_TO_HANDLE", signals);
  if (!timer_file.empty()) add("TORCHELASTIC_TIMER_FILE", timer_file);
  add("WORLD_SIZE", std::to_string(place.world_size));
  add("GROUP_WORLD_SIZE", std::to_string(place.nodes));
  add("ROLE_WORLD_SIZE", std::to_string(place.world_size));
  add("MASTER_ADDR", place.master_addr);
  add("MASTER_PORT", std::to_string(place.master_port));
  add("GROUP_RANK", std::to_string(place.group_rank));
  add("TORCHELASTIC_RESTART_COUNT", std::to_string(place.restart_count));
  if (config.virtual_local_rank) {
    // torch's virtual local rank: each worker's only GPU is device 0.
    add("LOCAL_RANK", "0");
    add("CUDA_VISIBLE_DEVICES", config.virtual_devices.at(static_cast<size_t>(place.local_rank)));
  } else {
    add("LOCAL_RANK", std::to_string(place.local_rank));
  }
  add("RANK", std::to_string(place.rank));
  add("ROLE_RANK", std::to_string(place.rank));
  add("TORCHELASTIC_ERROR_FILE", place.error_file);
  return env;
}

}  // namespace trun::agent
