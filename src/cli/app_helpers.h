// What the job subcommands share: finding an app by its handle, and
// following replicas' logs.
// Thread-safety: FollowLogs runs one thread per replica and serializes
// their output; the rest runs on the calling thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "schedulers/scheduler.h"

namespace trun::cli {

struct OpenedApp {
  std::unique_ptr<schedulers::Scheduler> scheduler;
  specs::AppHandle handle;
};

// The scheduler of `handle` ("local://trun/echo-bx..."), made for its session.
Result<OpenedApp> OpenApp(const std::string& handle);

// Prints the log lines of `replicas` ((role, id) pairs) to `fd`, each
// prefixed "role/id " (green on a terminal), one thread per replica, until
// each log ends (with options.tail: until the app ends).
Status FollowLogs(schedulers::Scheduler& s, const std::string& app_id,
                  const std::vector<std::pair<std::string, int>>& replicas,
                  const schedulers::LogOptions& options, int fd);

// Every (role, replica id) of the app, or of one role.
std::vector<std::pair<std::string, int>> ReplicasOf(const schedulers::DescribeAppResponse& d,
                                                    const std::string& role = "");

}  // namespace trun::cli
