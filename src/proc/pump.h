// LinePump: the path of one worker stream (stdout or stderr) from its pipe to
// the console and the log file, with no polling interval.
//
// Bytes are written to the file as they arrive, untouched (a crash never loses
// what was already read, and non-UTF-8 survives). The console copy is split
// into lines and each line is written whole, after the worker's prefix, so
// lines of different workers never interleave. A partial line waits on the
// console for its end, for EOF, or for a carriage return (progress bars), and
// is never dropped.
//
// Optionally (torchrun's --duplicate-std{out,err}-filters) each complete line
// that contains one of a set of strings is also written, prefixed, to a third
// sink, at the moment its end arrives; and the last bytes of the stream are
// kept, for the failure summary.
//
// Thread-safety: none; owned and fed by the agent's event-loop thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::proc {

class LinePump {
 public:
  // `console_fd` and `file_fd` may be -1 (no such sink). The pump does not
  // own either.
  LinePump(std::string prefix, int console_fd, int file_fd)
      : prefix_(std::move(prefix)), console_fd_(console_fd), file_fd_(file_fd) {}

  // Lines that contain any of `needles` (plain substrings, as torch's `needle
  // in line`, the line's end included) also go to `fd`, after the prefix and
  // ending in "\n" (torch's text-mode reading turns "\r\n" and "\r" into
  // "\n"). A line longer than 64 KiB is judged in 64 KiB pieces. The pump
  // does not own `fd`; several pumps may share it, since each line is one
  // write.
  void DuplicateMatching(int fd, std::vector<std::string> needles);
  // Keeps the last `bytes` bytes of the stream for Tail().
  void KeepTail(size_t bytes) { tail_limit_ = bytes; }
  const std::string& Tail() const { return tail_; }

  // Takes the next bytes read from the worker.
  void Feed(std::string_view bytes);
  // The stream ended: the console gets any partial line (and so does the
  // duplicate, if it matches).
  void Finish();

 private:
  void FlushConsole();
  void FeedDuplicate(std::string_view bytes);
  void EmitDuplicate(bool line_end);

  std::string prefix_;
  int console_fd_;
  int file_fd_;
  std::string console_buf_;  // prefixed, complete lines not yet written
  bool at_line_start_ = true;

  int dup_fd_ = -1;
  std::vector<std::string> needles_;
  std::string dup_line_;       // the current line, unprefixed, without its end
  bool dup_after_cr_ = false;  // the last bytes fed ended in "\r"

  size_t tail_limit_ = 0;
  std::string tail_;
};

// Writes all of `bytes` to fd, retrying short writes and EINTR. A sink that
// fails (a closed console, a full disk) is reported once per pump and then
// ignored, so a worker is never stopped by its log.
Status WriteAll(int fd, std::string_view bytes);

}  // namespace trun::proc
