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
#include <string_view>
#include <vector>

#include "cli/flags.h"
#include "common/status.h"

namespace trun::cli {

// `trun run`'s flags, as its parser knows them (for shell completion).
const std::vector<Flag>& RunFlags();

// TorchX's `run --stdin`: one JSON object of TorchX's TorchXRunArgs fields
// (component_name, scheduler and scheduler_args required; dryrun, wait, log,
// tee_logs, component_args, component_args_str, workspace, parent_run_id,
// scheduler_cfg optional) as the `trun run` arguments it stands for:
// scheduler_args as -cfg, component_args as --KEY VALUE, then
// component_args_str. Every problem at once; an unknown field, a workspace
// (trun has none) and a value of the wrong type are errors.
Result<Args> RunArgsFromJson(std::string_view json);

int RunCommand(const Args& args);

}  // namespace trun::cli
