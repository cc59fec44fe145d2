// The `local` scheduler: every replica is a process on this machine, run by
// a small supervisor process that is detached from the terminal that
// submitted the app, so the app outlives that terminal and any process can
// ask for it later (state and logs in local_state.h).
//
// TorchX's local_cwd, made to persist:
//   - replicas run in the submitter's working directory (${img_root}); the
//     image is not used; PATH gets that directory after (or, with
//     prepend_cwd, before) the role's and the submitter's PATH;
//   - each replica gets TORCHX_RANK0_HOST=localhost (the ${rank0_env}),
//     TORCHELASTIC_ERROR_FILE=<replica dir>/error.json (trun's agent writes
//     the root cause there), PET_LOG_DIR=<app dir>/torchelastic/<role>,
//     PYTHONUNBUFFERED=x, on top of the submitter's environment;
//   - stdout and stderr go to stdout.log and stderr.log as they are, and
//     whole lines of both to combined.log (what `trun log` shows);
//   - a failed replica is retried per its role's max_retries and
//     retry_policy (REPLICA: itself; ROLE: its role; APPLICATION: every
//     replica); the root cause's error file becomes the status's
//     structured error message;
//   - cancel stops every replica's process group: SIGTERM, then SIGKILL
//     after `stop_timeout` seconds; the app is CANCELLED.
// Unlike TorchX's, `list` works (apps are on disk) and `trun run` returns
// once the app is started unless --wait or --log.
//
// Thread-safety: as Scheduler; Log() reads files only and may run on
// several threads.
#pragma once

#include <string>

#include "schedulers/scheduler.h"

namespace trun::schedulers {

class LocalScheduler : public Scheduler {
 public:
  explicit LocalScheduler(std::string session);

  const specs::RunOpts& RunOpts() const override { return opts_; }
  Result<std::string> Schedule(const DryRunInfo& info) override;
  Result<DescribeAppResponse> Describe(const std::string& app_id) override;
  Status Log(const std::string& app_id, const std::string& role, int replica_id,
             const LogOptions& options,
             const std::function<bool(std::string_view)>& on_line) override;
  Status Cancel(const std::string& app_id) override;
  // Cancels, then removes the app's directory (state, request, logs).
  Status Delete(const std::string& app_id) override;
  Result<std::vector<ListAppResponse>> List() override;
  // Reads the workers below each running replica (agent/stacks.h's
  // RankedDescendants): the same user's processes, on this host.
  Result<StacksAnswer> Stacks(const std::string& app_id) override;

 protected:
  Result<DryRunInfo> DryRun(const specs::AppDef& app, const specs::Cfg& cfg) override;

 private:
  specs::RunOpts opts_;
};

}  // namespace trun::schedulers
