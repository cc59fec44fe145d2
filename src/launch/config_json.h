// A LaunchConfig as JSON: what TRUN_DRY_RUN=1 prints instead of launching
// (docs/cli.md#dry-run), so scripts and tests can see trun's decision for a
// command line without starting anything.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "launch/config.h"

namespace trun::launch {

// One JSON object, keyed by torchrun's LaunchConfig field names where there
// is one (min_nodes, max_nodes, nproc_per_node, run_id, rdzv_backend,
// rdzv_endpoint, max_restarts, ...), and the worker's command line; bytes
// that are not UTF-8 are U+FFFD in it.
std::string LaunchConfigJson(const LaunchConfig& c);

}  // namespace trun::launch
