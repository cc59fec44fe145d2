#include "launch/config_json.h"

#include <nlohmann/json.hpp>

namespace trun::launch {
namespace {

nlohmann::json StdJson(const StdSpec& s) {
  if (!s.is_map) return static_cast<int>(s.all);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [rank, level] : s.per_rank) j[std::to_string(rank)] = static_cast<int>(level);
  return j;
}

}  // namespace

std::string LaunchConfigJson(const LaunchConfig& c) {
  using nlohmann::json;
  json j;
  j["min_nodes"] = c.min_nodes;
  j["max_nodes"] = c.max_nodes;
  j["nproc_per_node"] = c.nproc_per_node;
  j["run_id"] = c.rdzv_id;
  j["rdzv_backend"] = c.rdzv_backend;
  j["rdzv_endpoint"] = c.rdzv_endpoint;
  j["standalone"] = c.standalone;
  j["node_rank"] = c.node_rank;
  j["master_addr"] = c.master_addr;
  j["master_port"] = c.master_port;
  j["local_addr"] = c.local_addr ? json(*c.local_addr) : json(nullptr);
  j["max_restarts"] = c.max_restarts;
  j["monitor_interval"] = c.monitor_interval;
  j["start_method"] = c.start_method;
  j["role"] = c.role;
  j["event_log_handler"] = c.event_log_handler;
  j["log_dir"] = c.log_dir ? json(*c.log_dir) : json(nullptr);
  j["redirects"] = StdJson(c.redirects);
  j["tee"] = StdJson(c.tee);
  j["local_ranks_filter"] = c.local_ranks_filter ? json(*c.local_ranks_filter) : json(nullptr);
  j["logs_specs"] = c.logs_specs ? json(*c.logs_specs) : json(nullptr);
  j["numa_binding"] = c.numa_binding ? json(*c.numa_binding) : json(nullptr);
  j["signals_to_handle"] = c.signals_to_handle;
  j["shutdown_timeout"] = c.shutdown_timeout_s;
  j["virtual_local_rank"] = c.virtual_local_rank;
  j["duplicate_stdout_filters"] = c.duplicate_stdout_filters;
  j["duplicate_stderr_filters"] = c.duplicate_stderr_filters;
  j["worker_argv"] = c.worker_argv;
  // A flag or a worker argument may hold any bytes (a file name in
  // Latin-1): those that are not UTF-8 show as U+FFFD rather than abort.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace trun::launch
