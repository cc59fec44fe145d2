#include "store/connection.h"

#include <fmt/format.h>

#include "common/net.h"
#include "store/pressure.h"

namespace trun::store {

// What an idle connection costs is mostly here (bench/RESULTS.md): this
// object, asio's state for its socket, and its pending wait's operation.
static_assert(sizeof(void*) != 8 || sizeof(Connection) <= 120,
              "a Connection outgrows the allocator's 128-byte chunk");

ConnectionPtr Connection::Make(ConnectionHost& host, Acceptor::Socket socket, uint64_t id,
                               const asio::ip::address& peer) {
  return ConnectionPtr(new Connection(host, std::move(socket), id, peer));
}

Connection::Connection(ConnectionHost& host, Acceptor::Socket socket, uint64_t id,
                       const asio::ip::address& peer)
    : id(id),
      host_(host),
      socket_(std::move(socket)),
      peer_(peer.is_v4() ? asio::ip::make_address_v6(asio::ip::v4_mapped, peer.to_v4())
                         : peer.to_v6()) {}

asio::ip::address Connection::peer() const { return Unmapped(peer_); }

void Connection::Start() {
  // Reads happen when the socket is readable (Read) and must fail rather
  // than wait once it is empty (OnReadable).
  std::error_code ec;
  socket_.non_blocking(true, ec);
  Read();
}

void Connection::Read() {
  socket_.async_wait(Acceptor::Socket::wait_read, OnWait{ConnectionPtr(this)});
}

// A closed connection's handlers return at once: its host may be gone.
void Connection::OnWait::operator()(std::error_code ec) const {
  if (self->closed) return;
  if (ec) return self->OnReadError(ec);
  self->OnReadable();
}

void Connection::OnReadError(std::error_code ec) {
  bool quiet = ec == asio::error::eof || ec == asio::error::operation_aborted ||
               ec == asio::error::connection_reset;
  host_.Drop(ConnectionPtr(this), quiet ? "" : ec.message());
}

// A connection has no read buffer of its own: it waits until its socket is
// readable, then reads through the server's one large buffer until the
// socket is empty, or for at most 16 of those reads (1 MiB) before the
// other connections get their turn. An idle connection then holds only its
// object and asio's state, which is what thousands of them mostly are
// (about 0.44 KiB each, bench/RESULTS.md).
void Connection::OnReadable() {
  std::array<char, 64 * 1024>& buf = host_.read_buf();
  for (int turn = 0; turn < 16; ++turn) {
    std::error_code ec;
    size_t k = socket_.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) return OnReadError(ec);
    if (!Consume(buf.data(), k)) return;
    if (k < buf.size()) break;
  }
  Read();
}

// Parses and handles what arrived; false when the connection is gone.
bool Connection::Consume(const char* data, size_t n) {
  if (closed || closing) return false;
  if (!spoke_) {
    spoke_ = true;
    host_.Spoke(*this);
  }
  if (link) return host_.LinkBytes(ConnectionPtr(this), data, n);
  if (!parser_) parser_ = std::make_unique<RequestParser>(host_.limits(), generation_);
  if (!Parse(data, n) || !host_.AfterRead(ConnectionPtr(this), n)) return false;
  // Between requests the parser holds nothing but the generation.
  if (parser_->pending() == nullptr && parser_->buffered() == 0) {
    generation_ = parser_->generation();
    parser_.reset();
  }
  return true;
}

// Feeds the parser and hands each whole request to the host; false when
// the connection is gone.
bool Connection::Parse(const char* data, size_t n) {
  if (!parser_->Append(data, n)) {
    host_.Drop(ConnectionPtr(this), parser_->error());
    return false;
  }
  Request req;
  while (true) {
    auto r = parser_->Next(&req);
    if (r == RequestParser::Result::kNeedMore) return true;
    if (r == RequestParser::Result::kError) {
      host_.Drop(ConnectionPtr(this), parser_->error());
      return false;
    }
    judged_args = 0;
    host_.Handle(ConnectionPtr(this), req);
    if (closed || closing) return false;
    if (link) {
      // The relay sends its first frame after the handshake's answer, so
      // nothing may follow the handshake in what it sent before.
      if (parser_->buffered() == 0) return true;
      host_.Drop(ConnectionPtr(this), "bytes after the link's handshake, before its answer");
      return false;
    }
  }
}

bool Connection::CanQueue(size_t n) const { return n <= ReplyRoom(); }

size_t Connection::ReplyRoom() const {
  size_t queued = outbox_ ? outbox_->out.size() + outbox_->sending.size() : 0;
  size_t max = host_.max_pending_reply_bytes();
  return queued < max ? max - queued : 0;
}

// One write is in flight at a time, and everything queued meanwhile goes
// out in the next one.
void Connection::Send(std::string_view bytes) {
  if (closed) return;
  if (!CanQueue(bytes.size())) return host_.Drop(ConnectionPtr(this), "too many unread replies");
  if (!outbox_) outbox_ = std::make_unique<Outbox>();
  outbox_->out.append(bytes);
  if (!writing_) Flush();
  Book(false);
}

// Large queues are booked with the host, which bounds what all of its
// connections' unread replies hold (pressure.h); small ones cost nothing.
// A relay's link is not: it carries a node's every client, proved the job
// token, and closing it for another's unread replies would fail the node.
void Connection::Book(bool drained) {
  if (link) return;
  const size_t queued = outbox_ ? outbox_->out.size() + outbox_->sending.size() : 0;
  if (!booked_ && queued < kBookedReplyBytes) return;
  booked_ = queued >= kBookedReplyBytes;
  host_.RepliesQueued(*this, booked_ ? queued : 0, drained);
}

void Connection::Flush() {
  if (!outbox_ || outbox_->out.empty() || closed) return;
  writing_ = true;
  outbox_->sending.swap(outbox_->out);
  outbox_->out.clear();
  asio::async_write(
      socket_, asio::buffer(outbox_->sending),
      [self = ConnectionPtr(this)](std::error_code ec, size_t) { self->OnWritten(ec); });
}

void Connection::OnWritten(std::error_code ec) {
  writing_ = false;
  // Idle connections hold no buffer.
  if (outbox_->out.empty()) {
    outbox_.reset();
  } else {
    std::string().swap(outbox_->sending);
  }
  if (closed) return;
  if (ec) {
    bool quiet = ec == asio::error::operation_aborted || ec == asio::error::broken_pipe ||
                 ec == asio::error::connection_reset;
    return host_.Drop(ConnectionPtr(this), quiet ? "" : ec.message());
  }
  Book(true);
  if (closing && !Sending()) return host_.Drop(ConnectionPtr(this), "");
  Flush();
}

void Connection::Close() {
  if (closed) return;
  closed = true;
  std::error_code ec;
  socket_.shutdown(Acceptor::Socket::shutdown_both, ec);
  socket_.close(ec);
  // Replies queued behind the write in flight go now, not when its handler
  // runs: a flood of clients closed for their unread replies would hold
  // them all until the loop gets to their handlers.
  if (outbox_) std::string().swap(outbox_->out);
}

size_t Connection::BufferBytes() const {
  size_t n = parser_ ? parser_->allocated() : 0;
  if (outbox_) n += HeapBytes(outbox_->out) + HeapBytes(outbox_->sending);
  return n;
}

std::string Connection::RemoteName(asio::ip::address* address) const {
  std::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (ec) return "?";
  *address = ep.address();
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace trun::store
