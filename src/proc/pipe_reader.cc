#include "proc/pipe_reader.h"

#include <unistd.h>

#include <cerrno>
#include <memory>

namespace trun::proc {

bool DrainPipe(PipeReader& r) {
  // One buffer per thread: every reader of a loop shares it. On the heap,
  // made at the first read: 64 KiB of static TLS would be cleared at the
  // start of every thread of the process, reader or not.
  constexpr size_t kBufBytes = 64 * 1024;
  thread_local std::unique_ptr<char[]> buf;
  if (!buf) buf = std::make_unique_for_overwrite<char[]>(kBufBytes);
  while (r.fd >= 0) {
    ssize_t n = ::read(r.fd, buf.get(), kBufBytes);
    if (n > 0) {
      if (r.on_bytes) r.on_bytes(static_cast<size_t>(n));
      r.pump->Feed(std::string_view(buf.get(), static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    ClosePipe(r);
  }
  return false;
}

void ClosePipe(PipeReader& r) {
  if (r.fd < 0) return;
  r.pump->Finish();
  if (r.watch) {
    r.watch->cancel();
    r.watch->release();
  }
  ::close(r.fd);
  r.fd = -1;
}

void WatchPipe(asio::io_context& io, const std::shared_ptr<PipeReader>& r,
               std::function<void()> after) {
  if (r->fd < 0) return;
  if (!r->watch) r->watch = std::make_unique<asio::posix::stream_descriptor>(io, r->fd);
  r->watch->async_wait(asio::posix::stream_descriptor::wait_read,
                       [&io, r, after = std::move(after)](std::error_code ec) mutable {
                         if (ec || r->fd < 0) return;
                         bool open = DrainPipe(*r);
                         if (after) after();
                         if (open) WatchPipe(io, r, std::move(after));
                       });
}

}  // namespace trun::proc
