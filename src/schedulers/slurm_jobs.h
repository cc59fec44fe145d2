// What SLURM says about jobs, read from the three places that say it:
//
//   squeue --json          the controller's jobs, every field, as JSON. Slurm
//                          22.05 ignores -j and --me with --json and prints
//                          every job it holds, so callers filter; field
//                          shapes differ by version (job_state a string or,
//                          from 23.11, a list; het_job_id and exit_code plain
//                          numbers or {"set", "number"} objects), all read.
//   scontrol -o show job   the same jobs as one line of Key=Value words each;
//                          for clusters whose squeue has no JSON support.
//   sacct --parsable2      jobs the controller has forgotten (after MinJobAge):
//                          from the accounting database, or with -c from the
//                          job-completion file when there is no database.
//                          '|'-separated with a header; one row per attempt
//                          (a requeued job has several) and per step
//                          (ID.batch, ID.0), of which only the job's last row
//                          counts.
//
// All three become SlurmJob values: one per job, and one per component of a
// heterogeneous job (each component is a job of its own with the leader's
// het_job_id).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "specs/app.h"

namespace trun::schedulers::slurm {

struct SlurmJob {
  std::string job_id;      // this job's (or component's) id
  std::string het_job_id;  // the leader's id for a component; empty otherwise
  int het_offset = 0;      // the component's place in its heterogeneous job
  std::string name;
  std::string user_id;    // numeric; empty when the source does not say
  std::string state;      // SLURM's base state: "RUNNING", "FAILED", ...
  std::string reason;     // why it is pending or how it ended ("NonZeroExitCode")
  std::string exit_code;  // "EXIT:SIGNAL", e.g. "1:0"; empty when unknown
  int restarts = -1;      // requeues so far; -1 when unknown
  std::string nodes;      // SLURM's compressed node list, e.g. "node[1-2]"
  std::string work_dir;
  std::string command;  // the batch script's path
};

// TorchX's mapping (slurm_scheduler.py SLURM_STATES): BOOT_FAIL, DEADLINE,
// FAILED, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, REVOKED, TIMEOUT -> FAILED;
// CANCELLED -> CANCELLED; COMPLETED -> SUCCEEDED; PENDING, REQUEUED,
// RESIZING, SUSPENDED -> PENDING; RUNNING -> RUNNING; anything else (e.g.
// COMPLETING, CONFIGURING, REQUEUE_HOLD) -> UNKNOWN. A trailing "+" (sacct's
// truncation mark) and words after the first ("CANCELLED by 0") are ignored.
specs::AppState AppStateFromSlurm(std::string_view state);

// The jobs of `squeue --json`. IOError when the text is not squeue's JSON;
// Unavailable with SLURM's words when it reports errors (e.g. the controller
// could not be reached: squeue --json then still exits 0).
Result<std::vector<SlurmJob>> ParseSqueueJson(std::string_view text);

// The jobs of `scontrol -o show job` (one line per job).
std::vector<SlurmJob> ParseScontrolJobs(std::string_view text);

// The jobs of `sacct --parsable2` (with a header naming the columns), the
// last row of each job id, steps left out. Columns used: JobID, JobName,
// State, ExitCode, NodeList, WorkDir, UID/User (any may be missing); the
// number of rows a job has, minus one, is its restarts.
std::vector<SlurmJob> ParseSacct(std::string_view text);

// The columns trun asks sacct for.
inline constexpr std::string_view kSacctFormat = "JobID,JobName,State,ExitCode,NodeList,WorkDir";

}  // namespace trun::schedulers::slurm
