// Where a worker's output goes: torchrun's log layout
// (<log_dir>/<run_id>_<random>/attempt_<N>/<local_rank>/{stdout,stderr}.log,
// error.json, attempt_<N>/filtered_std{out,err}.log), the console with each
// line prefixed, or both.
//
// A stream that is only shown goes straight to trun's console when that is
// a terminal, as torchrun does, and otherwise through a pipe into a
// proc::LinePump that writes its whole lines, unprefixed, to the console;
// one only redirected is written by the worker into its file; a teed and
// shown one goes through a pipe into a LinePump that writes whole prefixed
// lines to the console and the bytes to the file. Where trun sees a stream
// (a pump or a file), its last bytes are kept for the failure report.
//
// Thread-safety: none; used from the agent's event-loop thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/config.h"
#include "proc/pipe_reader.h"

namespace trun::agent {

// $TMPDIR, else /tmp.
std::string TempDir();

// torch's log-dir naming: "<parent>/<prefix><8 random chars>", created
// exclusively, mode 0700.
Result<std::string> MakeUniqueDir(const std::string& parent, const std::string& prefix);

// Makes this run's log directory, <log_dir>/<run_id>_<random> (under a
// fresh $TMPDIR/torchelastic_<random> without --log-dir), as torch names
// it; "" for --log-dir /dev/null. An unusable --log-dir is InvalidArgument.
Result<std::string> MakeRunLogDir(const launch::LaunchConfig& config);

// The short host name, as torch's ${hostname} (socket.gethostname()).
std::string ShortHostname();

// torch's string.Template.safe_substitute of a line-prefix template over
// ${role_name}, ${local_rank}, ${rank}, ${hostname}.
std::string SubstitutePrefix(std::string tmpl, const std::string& role, int local_rank, int rank,
                             const std::string& hostname);

// One attempt's directory and its filtered_std{out,err}.log.
class AttemptFiles {
 public:
  // `run_log_dir` "" (--log-dir /dev/null): no files at all.
  static Result<AttemptFiles> Open(const std::string& run_log_dir, int attempt,
                                   const launch::LaunchConfig& config);
  AttemptFiles(AttemptFiles&& other) noexcept;
  AttemptFiles& operator=(AttemptFiles&& other) noexcept;
  ~AttemptFiles();

  const std::string& dir() const { return dir_; }
  int filtered_out() const { return filtered_out_; }
  int filtered_err() const { return filtered_err_; }

 private:
  AttemptFiles() = default;
  std::string dir_;
  int filtered_out_ = -1;
  int filtered_err_ = -1;
};

// One worker's two streams, from its start until the attempt is closed.
struct WorkerOutput {
  // Shared with pending read handlers, which may outlive the attempt.
  std::shared_ptr<proc::PipeReader> out = std::make_shared<proc::PipeReader>();
  std::shared_ptr<proc::PipeReader> err = std::make_shared<proc::PipeReader>();
  std::string error_file;      // attempt_N/<local_rank>/error.json, "" without files
  std::string stdout_log;      // the file its stdout goes to, if it does
  std::string stderr_log;      // the file its stderr goes to, if it does
  std::vector<int> owned_fds;  // log files, closed with the attempt
  // What the worker gets as its stdout and stderr (-1: trun's own). Ours
  // to close once the worker holds them: CloseChildEnds().
  int child_out = -1;
  int child_err = -1;

  // Sets up both streams of local rank `local_rank` under `files`.
  // `on_bytes(is_stderr, n)` counts what the pumps read.
  Status SetUp(const launch::LaunchConfig& config, const AttemptFiles& files, int local_rank,
               const std::string& prefix, int devnull,
               const std::function<void(bool, size_t)>& on_bytes);
  // Closes our copies of the child's ends (pipes' write ends), so that the
  // pipes reach EOF when the worker exits.
  void CloseChildEnds(int devnull);
  // The last of one stream, where trun sees it: through its pump, or in its
  // file when redirected; "" when it goes straight to a terminal.
  std::string Tail(bool is_stderr) const;
  // Takes what the pipes hold now.
  void Drain();
  // Drains, writes out a partial last line, closes pipes and files.
  void Close();

 private:
  Status SetUpStream(const launch::LaunchConfig& config, const AttemptFiles& files, int local_rank,
                     bool is_stderr, const std::string& prefix, int devnull,
                     const std::function<void(bool, size_t)>& on_bytes);
};

}  // namespace trun::agent
