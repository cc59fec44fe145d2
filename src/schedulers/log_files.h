// Reading replicas' log files line by line, and following them as they
// grow: what `trun log` does for schedulers whose replicas write files
// (local, slurm).
//
// Thread-safety: FollowFiles keeps no shared state; several may run at once.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedulers/scheduler.h"

namespace trun::schedulers {

// Calls `on_line` with each line (without its newline) of `paths`, in turn,
// keeping those that match options.regex; a file that does not exist (yet)
// has no lines. With options.tail, keeps reading what is appended until
// `ended()` says the app is over (asked before each read, so the last read
// after it has everything the replicas wrote), polling every 100 ms; lines
// of several files then come in the order they are found. Stops early when
// `on_line` returns false. InvalidArgument for a bad regex.
// `on_line` behind options.regex: a line that does not match is skipped
// (the filter returns true for it, to go on). InvalidArgument for a bad
// regex.
Result<std::function<bool(std::string_view)>> FilterLines(
    const LogOptions& options, std::function<bool(std::string_view)> on_line);

Status FollowFiles(const std::vector<std::string>& paths, const LogOptions& options,
                   const std::function<bool()>& ended,
                   const std::function<bool(std::string_view)>& on_line);

}  // namespace trun::schedulers
