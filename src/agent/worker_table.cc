#include "agent/worker_table.h"

#include <cstdlib>

#include "common/strings.h"
#include "proc/spawn.h"
#include "proc/warm_table.h"

namespace trun::agent {
namespace {

// Warm starts: the workers' interpreter imports TRUN_WARM_IMPORTS (default
// torch) once. Its environment is the agent's plus what every worker shares
// and libraries read when they load (OMP_NUM_THREADS); never a rank's.
proc::WarmOptions WarmOptionsFor(const launch::LaunchConfig& config) {
  proc::WarmOptions o;
  o.python = config.worker_argv.at(0);
  const char* imports = std::getenv("TRUN_WARM_IMPORTS");
  for (const std::string& name : Split(imports ? imports : "torch", ',')) {
    if (!Trim(name).empty()) o.imports.emplace_back(Trim(name));
  }
  o.env = proc::EnvironWith();
  if (config.set_omp_num_threads) o.env.emplace_back("OMP_NUM_THREADS=1");
  o.default_signals = config.signals_to_handle;
  return o;
}

}  // namespace

Result<std::unique_ptr<proc::ProcessTable>> MakeWorkerTable(asio::io_context& io,
                                                            const launch::LaunchConfig& config) {
  // A bound worker needs its own exec under its CPUs: --numa-binding starts
  // workers cold, as torchrun starts them under numactl.
  if (config.start_method == "forkserver" && config.worker_cpus.empty()) {
    auto t = proc::WarmProcessTable::Start(io, WarmOptionsFor(config));
    if (!t.ok()) return t.status();
    return std::unique_ptr<proc::ProcessTable>(std::move(*t));
  }
  auto t = proc::SystemProcessTable::Start(io);
  if (!t.ok()) return t.status();
  return std::unique_ptr<proc::ProcessTable>(std::move(*t));
}

}  // namespace trun::agent
