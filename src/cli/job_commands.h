// The TorchX half of trun's command line: `trun run COMPONENT ...` and the
// subcommands that ask about apps afterwards (status, log, cancel, list,
// describe) or about what there is (builtins, runopts, configure). Each is a
// row of the table in commands.cc; see docs/cli.md for every flag.
//
// Exit codes: 0 done (run: the app was submitted, or with --wait/--log it
// SUCCEEDED); 1 the app ended otherwise, or a cancel did not finish; 2 bad
// input (a flag, a component or its arguments, a spec, a run option, an
// unknown app, a scheduler that is not available yet); 3 trun could not do
// it (the state directory, starting the supervisor, no sbatch on PATH); 4 the
// scheduler's service cannot be reached (the SLURM controller), nothing done.
//
// Thread-safety: each runs once per process, on the calling thread (log
// following starts one thread per replica and joins them).
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"

namespace trun::cli {

using Args = std::vector<std::string>;

// `trun run`'s flags, as its parser knows them (for shell completion).
const std::vector<Flag>& RunFlags();

int RunCommand(const Args& args);
int StatusCommand(const Args& args);
int LogCommand(const Args& args);
int CancelCommand(const Args& args);
int ListCommand(const Args& args);
int DescribeCommand(const Args& args);
int BuiltinsCommand(const Args& args);
int RunoptsCommand(const Args& args);
int ConfigureCommand(const Args& args);
// `trun local-supervisor APP_DIR READY_FD`: started by the local scheduler,
// not by users.
int LocalSupervisorCommand(const Args& args);

}  // namespace trun::cli
