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
// Thread-safety: none; owned and fed by the agent's event-loop thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace trun::proc {

class LinePump {
 public:
  // `console_fd` and `file_fd` may be -1 (no such sink). The pump does not
  // own either.
  LinePump(std::string prefix, int console_fd, int file_fd)
      : prefix_(std::move(prefix)), console_fd_(console_fd), file_fd_(file_fd) {}

  // Takes the next bytes read from the worker.
  void Feed(std::string_view bytes);
  // The stream ended: the console gets any partial line.
  void Finish();

 private:
  void FlushConsole();

  std::string prefix_;
  int console_fd_;
  int file_fd_;
  std::string console_buf_;  // prefixed, complete lines not yet written
  bool at_line_start_ = true;
};

// Writes all of `bytes` to fd, retrying short writes and EINTR. A sink that
// fails (a closed console, a full disk) is reported once per pump and then
// ignored, so a worker is never stopped by its log.
Status WriteAll(int fd, std::string_view bytes);

}  // namespace trun::proc
