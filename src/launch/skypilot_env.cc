#include "launch/skypilot_env.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "common/strings.h"

namespace trun::launch {

Result<std::map<std::string, std::string>> SkyPilotLaunchDefaults(const GetEnv& env) {
  std::map<std::string, std::string> d;
  const std::string ips = env("SKYPILOT_NODE_IPS");
  const std::string rank = env("SKYPILOT_NODE_RANK");
  if (Trim(ips).empty() || Trim(rank).empty()) return d;

  std::vector<std::string> hosts;
  for (const std::string& line : Split(ips, '\n')) {
    if (!Trim(line).empty()) hosts.emplace_back(Trim(line));
  }
  std::string nodes(Trim(env("SKYPILOT_NUM_NODES")));
  if (nodes.empty()) nodes = std::to_string(hosts.size());
  auto n = ParseInt(nodes);
  auto r = ParseInt(Trim(rank));
  if (!n || *n < 1 || !r || *r < 0 || *r >= *n || hosts.empty()) {
    return Status::InvalidArgument(fmt::format(
        "inside a SkyPilot task, but its environment does not say how many nodes there are and "
        "which this is (SKYPILOT_NUM_NODES='{}', SKYPILOT_NODE_RANK='{}', {} host(s) in "
        "SKYPILOT_NODE_IPS); give --nnodes, --node-rank and --rdzv-endpoint yourself",
        env("SKYPILOT_NUM_NODES"), rank, hosts.size()));
  }
  if (auto gpus = ParseInt(Trim(env("SKYPILOT_NUM_GPUS_PER_NODE"))); gpus && *gpus > 0) {
    d["nproc_per_node"] = std::to_string(*gpus);
  }
  if (*n == 1) return d;
  std::string task(Trim(env("SKYPILOT_TASK_ID")));
  if (task.empty()) task = "skypilot";
  // FNV-1a of the task id: the same port on every node of the task.
  uint32_t h = 2166136261u;
  for (unsigned char c : task) h = (h ^ c) * 16777619u;
  const std::string port = std::to_string(20000 + h % 10000);

  d["nnodes"] = nodes;
  d["node_rank"] = std::to_string(*r);
  d["rdzv_id"] = task;
  d["rdzv_backend"] = "c10d";
  d["rdzv_endpoint"] = hosts.front() + ":" + port;
  return d;
}

}  // namespace trun::launch
