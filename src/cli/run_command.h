// `trun run [-s SCHEDULER] [-cfg K=V,...] COMPONENT [component args]`: the
// TorchX half's entry point: a component (builtin or file) becomes an
// AppDef, which a scheduler submits (or prints, with --dryrun); with --wait
// or --log it follows the app to its end. See docs/cli.md for every flag.
//
// Exit codes (common/exit_code.h): 0 submitted (with --wait/--log: the app
// SUCCEEDED), or --dryrun; 1 with --wait/--log the app ended otherwise; 2 bad
// input, nothing submitted (a flag, a component or its arguments, a spec, a
// run option, a scheduler that is not available yet); 3 trun could not do it
// (the state directory, starting the supervisor, no sbatch on PATH); 4 the
// scheduler's service cannot be reached, nothing submitted.
//
// Thread-safety: runs once per process, on the calling thread (log
// following starts one thread per replica and joins them).
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"

namespace trun::cli {

// `trun run`'s flags, as its parser knows them (for shell completion).
const std::vector<Flag>& RunFlags();

int RunCommand(const Args& args);

}  // namespace trun::cli
