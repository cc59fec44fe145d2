// Which process table the agent's workers run in: the kernel's
// (proc::SystemProcessTable: each worker a fresh clone and exec), or, with
// --start-method forkserver, proc::WarmProcessTable (workers forked from an
// interpreter that imported TRUN_WARM_IMPORTS once; docs/cli.md, "Warm
// starts").
//
// Thread-safety: the table is made on, and belongs to, the agent's loop.
#pragma once

#include <asio.hpp>
#include <memory>

#include "common/status.h"
#include "launch/config.h"
#include "proc/process_table.h"

namespace trun::agent {

Result<std::unique_ptr<proc::ProcessTable>> MakeWorkerTable(asio::io_context& io,
                                                            const launch::LaunchConfig& config);

}  // namespace trun::agent
