// PipeReader: a child's output pipe read by an asio event loop, the moment
// data arrives, into a LinePump (pump.h). Used by the agent for its
// workers' teed streams and by the local scheduler's supervisor for its
// replicas' output.
//
// Thread-safety: none; owned by one event-loop thread.
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>

#include "proc/pump.h"

namespace trun::proc {

struct PipeReader {
  int fd = -1;  // the read end, non-blocking; -1 once closed
  std::unique_ptr<asio::posix::stream_descriptor> watch;
  std::unique_ptr<LinePump> pump;
  // Told of each read's size (the agent counts log bytes); may be empty.
  std::function<void(size_t)> on_bytes;
};

// Reads whatever the pipe holds now into the pump. Returns false once it
// reached EOF (and closed the reader).
bool DrainPipe(PipeReader& r);

// Finishes the pump (a partial line is written) and closes the pipe.
void ClosePipe(PipeReader& r);

// Reads the pipe on `io` as data arrives until EOF; `after` (if any) runs
// after each read, also the last. The handler holds `r`, so the reader
// outlives its owner's interest in it.
void WatchPipe(asio::io_context& io, const std::shared_ptr<PipeReader>& r,
               std::function<void()> after = {});

}  // namespace trun::proc
