// The local scheduler's supervisor: one detached process per app (started
// as `trun local-supervisor APP_DIR READY_FD` by LocalScheduler::Schedule)
// that runs the app's replicas to the end. Its state machine is described
// in local_supervisor.cc.
//
// Thread-safety: RunLocalSupervisor runs the process's one event loop on the
// calling thread; call it once.
#pragma once

#include <string>

#include "proc/process_table.h"

namespace trun::schedulers {

// Runs the app described by <app_dir>/request.json to its end, recording
// every change in state.json. Writes one byte to `ready_fd` (then closes it)
// once it has recorded itself, so that the submitter knows it is running.
// Returns the process's exit code.
int RunLocalSupervisor(const std::string& app_dir, int ready_fd);

// As above, with the replicas in the table `make_table` makes: the kernel's
// (proc::SystemProcessTable) above, a fake in the supervisor's unit tests.
int RunLocalSupervisor(const std::string& app_dir, int ready_fd,
                       const proc::ProcessTableFactory& make_table);

}  // namespace trun::schedulers
