#include "store/connection.h"

#include <fmt/format.h>

namespace trun::store {

using asio::ip::tcp;

Connection::Connection(std::shared_ptr<ConnectionHost> keep_host, tcp::socket socket,
                       const Limits& limits, size_t max_pending_reply_bytes, uint64_t id,
                       std::array<char, 64 * 1024>& read_buf)
    : id(id),
      parser(limits),
      host_(std::move(keep_host)),
      socket_(std::move(socket)),
      max_pending_reply_bytes_(max_pending_reply_bytes),
      shared_buf_(read_buf) {}

void Connection::Start() {
  // Reads happen when the socket is readable (Read) and must fail rather
  // than wait once it is empty (OnReadable).
  std::error_code ec;
  socket_.non_blocking(true, ec);
  Read();
}

void Connection::Read() {
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](std::error_code ec) {
    if (ec) return self->OnReadError(ec);
    self->OnReadable();
  });
}

void Connection::OnReadError(std::error_code ec) {
  bool quiet = ec == asio::error::eof || ec == asio::error::operation_aborted ||
               ec == asio::error::connection_reset;
  host_->Drop(shared_from_this(), quiet ? "" : ec.message());
}

// A connection has no read buffer of its own: it waits until its socket is
// readable, then reads through the server's one large buffer until the
// socket is empty, or for at most 16 of those reads (1 MiB) before the
// other connections get their turn. An idle connection then holds only its
// object and asio's state, which is what thousands of them mostly are
// (about 0.5 KiB each where a 512-byte buffer of its own made it 1.5).
void Connection::OnReadable() {
  for (int turn = 0; turn < 16; ++turn) {
    std::error_code ec;
    size_t k = socket_.read_some(asio::buffer(shared_buf_), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) return OnReadError(ec);
    if (!Consume(shared_buf_.data(), k)) return;
    if (k < shared_buf_.size()) break;
  }
  Read();
}

// Parses and handles what arrived; false when the connection is gone.
bool Connection::Consume(const char* data, size_t n) {
  if (closed || closing) return false;
  if (!spoke_) {
    spoke_ = true;
    host_->Spoke(*this);
  }
  if (link) return host_->LinkBytes(shared_from_this(), data, n);
  if (!parser.Append(data, n)) {
    host_->Drop(shared_from_this(), parser.error());
    return false;
  }
  Request req;
  while (true) {
    auto r = parser.Next(&req);
    if (r == RequestParser::Result::kNeedMore) break;
    if (r == RequestParser::Result::kError) {
      host_->Drop(shared_from_this(), parser.error());
      return false;
    }
    judged_args = 0;
    host_->Handle(shared_from_this(), req);
    if (closed || closing) return false;
    if (link) {
      // The relay sends its first frame after the handshake's answer, so
      // nothing may follow the handshake in what it sent before.
      if (parser.buffered() == 0) break;
      host_->Drop(shared_from_this(), "bytes after the link's handshake, before its answer");
      return false;
    }
  }
  return host_->AfterRead(shared_from_this(), n);
}

bool Connection::CanQueue(size_t n) const { return n <= ReplyRoom(); }

size_t Connection::ReplyRoom() const {
  size_t queued = out_.size() + sending_.size();
  return queued < max_pending_reply_bytes_ ? max_pending_reply_bytes_ - queued : 0;
}

// One write is in flight at a time, and everything queued meanwhile goes
// out in the next one.
void Connection::Send(std::string_view bytes) {
  if (closed) return;
  if (!CanQueue(bytes.size())) return host_->Drop(shared_from_this(), "too many unread replies");
  out_.append(bytes);
  if (!writing_) Flush();
}

void Connection::Flush() {
  if (out_.empty() || closed) return;
  writing_ = true;
  sending_.swap(out_);
  out_.clear();
  asio::async_write(
      socket_, asio::buffer(sending_), [self = shared_from_this()](std::error_code ec, size_t) {
        self->writing_ = false;
        std::string().swap(self->sending_);  // idle connections hold no buffer
        if (ec) {
          bool quiet = ec == asio::error::operation_aborted || ec == asio::error::broken_pipe ||
                       ec == asio::error::connection_reset;
          return self->host_->Drop(self, quiet ? "" : ec.message());
        }
        if (self->closing && self->out_.empty()) return self->host_->Drop(self, "");
        self->Flush();
      });
}

void Connection::Close() {
  if (closed) return;
  closed = true;
  std::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

size_t Connection::BufferBytes() const {
  return parser.allocated() + HeapBytes(out_) + HeapBytes(sending_);
}

std::string Connection::RemoteName(asio::ip::address* address) const {
  std::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (ec) return "?";
  *address = ep.address();
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace trun::store
