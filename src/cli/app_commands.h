// The TorchX half of trun's command line after `trun run` (run_command.h):
// the subcommands that ask about apps (status, log, cancel, delete, list, describe)
// or about what there is (builtins, runopts, configure). Each is a row of
// the table in commands.cc; see docs/cli.md for every flag.
//
// Exit codes (common/exit_code.h): 0 done; 1 a cancel did not finish; 2 bad
// input (a flag, an unknown app); 3 trun could not do it (the state
// directory); 4 the scheduler's service cannot be reached (the SLURM
// controller), nothing done; 5 another user's app.
//
// Thread-safety: each runs once per process, on the calling thread (log
// following starts one thread per replica and joins them).
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"

namespace trun::cli {

int StatusCommand(const Args& args);
int LogCommand(const Args& args);
int StackCommand(const Args& args);
// Hidden: a node's part of `trun stack` of a SLURM app (schedulers/slurm_stacks.h).
int SlurmStackCommand(const Args& args);
int CancelCommand(const Args& args);
int DeleteCommand(const Args& args);
int ListCommand(const Args& args);
int DescribeCommand(const Args& args);
int BuiltinsCommand(const Args& args);
int RunoptsCommand(const Args& args);
int ConfigureCommand(const Args& args);
// `trun local-supervisor APP_DIR READY_FD`: started by the local scheduler,
// not by users.
int LocalSupervisorCommand(const Args& args);

}  // namespace trun::cli
