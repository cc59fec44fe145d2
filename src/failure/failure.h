// Failures: torch's error-file format, the root-cause rule, torchrun's
// failure table and the error file trun writes of its own. The agent (its
// workers), the local scheduler (its replicas), the SLURM scheduler (its
// nodes' agents) and the kubernetes scheduler (its pods) all judge failures
// here, by one rule.
//
// torch's @record decorator writes, on an uncaught exception, to
// $TORCHELASTIC_ERROR_FILE:
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1795338824"}}}
// (older writers: {"message": "<str>", "timestamp": <int>}). trun's agent
// writes its root cause in the same shape, with "errorCode" added.
//
// The root-cause rule (RootCause): among the failures trun did not cause by
// stopping the process, the earliest; a failure is dated by its error file's
// timestamp, else by when trun saw it (both in whole seconds, as torch
// dates them). Within one second, a failure with an error file comes first
// (it says why), then, among agents' files read from disk (the local and
// SLURM schedulers' replicas), the file written first (its modification
// time, to the nanosecond: a peer's "connection closed" is written after
// the exception that closed it, often within the same second, and its agent
// may end first; a time not known, as of a pod's termination message, comes
// after every known one), then the lowest rank (among replicas: the one
// seen first). Only when every failure was a stopped one is the earliest of
// those the root cause. An agent's error file keeps its root cause's time
// (see WriteAgentErrorFile); among one agent's workers the files' times are
// not compared, as torchrun does not compare them.
//
// Thread-safety: pure functions, plus file I/O.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::failure {

inline constexpr const char* kNotAvailable = "<N/A>";

struct WorkerFailure {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  // The exit code, or minus the signal number, as torch reports it.
  int exitcode = 0;
  // The worker's error file, or "<N/A>" when it wrote none.
  std::string error_file = kNotAvailable;
  // The error file's JSON text, empty when there is none.
  std::string error_json;
  // The traceback (from the file) or a generated one-line explanation.
  std::string message;
  int64_t timestamp = 0;  // seconds since the epoch
  // The error file's ErrorFile::written_ns; without one, when the exit was
  // seen (DescribeFailure), in the same unit.
  int64_t written_ns = 0;
  // What to do about it, in one line, when trun knows the failure (see
  // FailureHint); empty otherwise.
  std::string hint;
  // Its last lines of output (FormatLastLines), printed before the table;
  // empty when trun saw none of its output.
  std::string last_lines;
  // A sibling that ended non-zero after trun stopped it because another
  // worker failed. Listed, as torchrun 2.x lists it, but never the root
  // cause.
  bool stopped = false;
};

// One line that says how to fix a failure whose error text (a worker's error
// file, traceback or stderr) is one trun recognizes; "" for any other text.
// Known: torch's "use_libuv was requested but PyTorch was built without
// libuv support" (a torch 2.x built without libuv, e.g. Debian's).
std::string FailureHint(std::string_view text);

// An error file as torch's @record (or trun's agent) wrote it.
struct ErrorFile {
  std::string json;     // the whole text
  std::string message;  // the traceback, else the message
  std::optional<int64_t> timestamp;
  bool legacy = false;  // the older {"message": "<str>"} form
  // The file's modification time, nanoseconds since the epoch; 0 for text
  // that came from no file.
  int64_t written_ns = 0;
};

// NotFound when there is no file at `path`; InvalidArgument, naming the
// file and the problem, for a torn or foreign one.
Result<ErrorFile> ReadErrorFile(const std::string& path);
// The same, of an error file's text (`what` names where it came from, e.g.
// a pod's termination message).
Result<ErrorFile> ParseErrorFile(std::string text, std::string_view what);

// What the rule needs to know of a failure.
struct FailureKey {
  int64_t timestamp = 0;
  bool has_error_file = false;
  int rank = 0;  // or any order that breaks the last tie
  bool stopped = false;
  int64_t written_ns = 0;  // ErrorFile::written_ns of an agent's file; 0: unknown
};

// Index of the root cause in `failures` (non-empty), by the rule above.
size_t RootCause(std::span<const FailureKey> failures);

// Builds the failure of a worker that ended with `exitcode`, reading its
// error file when there is one. `detected_at` dates a failure without file.
// `stderr_tail`, the last of its stderr when trun saw it, only feeds the hint.
WorkerFailure DescribeFailure(int local_rank, int global_rank, pid_t pid, int exitcode,
                              const std::string& error_file, int64_t detected_at,
                              std::string_view stderr_tail = {});

// The rule over workers' failures.
size_t RootCause(const std::vector<WorkerFailure>& failures);

// One attempt's failed workers, in the order they were seen, and their root
// cause by the rule above, chosen as each one is added: everyone who reports
// the attempt (the log, the failure table, the agent's error file, the
// events) names the same worker without choosing again.
//
// Thread-safety: a plain value.
class AttemptFailures {
 public:
  void Add(WorkerFailure failure);
  void Clear();
  bool empty() const { return failures_.empty(); }
  const std::vector<WorkerFailure>& all() const { return failures_; }
  // The root cause; call only when !empty().
  const WorkerFailure& root() const { return failures_[root_]; }
  size_t root_index() const { return root_; }

 private:
  std::vector<WorkerFailure> failures_;
  size_t root_ = 0;
};

// The last `n` lines of each of a worker's two streams (`out_tail`,
// `err_tail`: the last bytes trun kept of each), for the report printed
// before the failure table:
//
//   last lines of rank R (local_rank L, pid P):
//     stdout | <line>
//     stderr | <line>
//
// stdout's lines first, then stderr's (the two are separate pipes, so their
// relative order is unknown; a traceback is on stderr, next to the table).
// A carriage return keeps what follows it (a progress bar's last state).
// "" when `n` is 0 or both tails hold no line.
std::string FormatLastLines(const WorkerFailure& f, std::string_view out_tail,
                            std::string_view err_tail, size_t n);

// torchrun 2.x's ChildFailedError message, byte for byte (including the
// leading newline): "<name> FAILED", other failures (stopped siblings too),
// then the root cause; a signal's name ends its exitcode line. A failure
// with a hint gets one more row, "  hint      : ...", after its traceback.
std::string FormatFailureTable(const std::string& name, const std::vector<WorkerFailure>& failures,
                               const std::string& hostname);

// The failure report (docs/cli.md, "The failure report"): what a program
// that runs trun needs to know of a failed worker group, as one JSON object
// on one line, so that it never reads the failure table:
//   {"name": NAME, "host": HOST, "restarts": N, "root_cause": INDEX,
//    "failures": [{"rank": R, "local_rank": L, "pid": P, "exitcode": C,
//                  "signal": "SIGSEGV" or null, "host": HOST, "time": T,
//                  "error_file": PATH or null, "stopped": B, "message": M}, ...]}
// `root_cause` indexes `failures` (the attempt's root cause); call only when
// !failures.empty().
std::string FailureReportJson(const std::string& name, const AttemptFailures& failures,
                              const std::string& hostname, int64_t restarts);

// What starts the report's line on stderr.
inline constexpr std::string_view kFailureReportMark = "trun-failure-json: ";

// Writes a report to `where`: a file (whole, through a `.tmp` file and a
// rename), or, for "-", one line on stderr that starts with
// kFailureReportMark (the stream is all a caller over SSH has).
Status WriteFailureReport(const std::string& where, const std::string& report);

// Writes the root cause to `path` as torch's launcher does: the worker's own
// error file with "errorCode" added under "message", or, when the worker
// wrote none, a record in the same shape built from the failure. A hint is
// appended to the message, on a line of its own. The file gets
// root.written_ns as its modification time (where the file system allows).
// A file that a rename cannot replace (Kubernetes' /dev/termination-log) is
// written in place.
Status WriteAgentErrorFile(const std::string& path, const WorkerFailure& root);

}  // namespace trun::failure
