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

// A client that sends requests faster than it reads their replies is held
// back: once kHoldBackReplyBytes of its replies wait, its next requests stay
// in the parser, unhandled, until its replies drain. Without it, one read of
// a few kilobytes of GETs of a large value made the store copy that value
// once per GET (each reply is a copy) before any budget could act: a few
// hundred such clients kept the store's loop copying for seconds and their
// replies held gigabytes. What it sends meanwhile is still read, and counts
// with its unread replies (Book), so a client that pipelines large requests
// before it reads a reply is not stalled by the store, and one that never
// reads is held to the budget of unread replies (pressure.h), however much
// it sends. torch's clients wait for each reply before the next request,
// so none is ever held back; a relay's link is not (it carries a node's
// every client, each of which reads its own replies).
bool Connection::Backlogged() const { return !link && Unsent() >= kHoldBackReplyBytes; }

// Handles what a held-back connection kept once its replies drained. Its
// socket's wait for bytes is pending meanwhile, as ever.
void Connection::Resume() {
  held_back_ = false;
  if (parser_) {
    if (!HandleParsed() || !host_.AfterRead(ConnectionPtr(this), 0)) return;
    if (held_back_) return;
    ReleaseIdleParser();
  }
  Book(false);
}

// Between requests the parser holds nothing but the generation.
void Connection::ReleaseIdleParser() {
  if (parser_->pending() == nullptr && parser_->buffered() == 0) {
    generation_ = parser_->generation();
    parser_.reset();
  }
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
  ReleaseIdleParser();
  return true;
}

// Feeds the parser and hands each whole request to the host; false when
// the connection is gone.
bool Connection::Parse(const char* data, size_t n) {
  if (!parser_->Append(data, n)) {
    host_.Drop(ConnectionPtr(this), parser_->error());
    return false;
  }
  return HandleParsed();
}

// Hands the parser's whole requests to the host until it needs more bytes
// or the connection is held back; false when the connection is gone.
bool Connection::HandleParsed() {
  Request req;
  while (true) {
    if (Backlogged()) {
      held_back_ = true;
      Book(false);
      return true;
    }
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
  size_t queued = Unsent();
  size_t max = host_.max_pending_reply_bytes();
  return queued < max ? max - queued : 0;
}

size_t Connection::Unsent() const {
  return outbox_ ? outbox_->sending.size() - outbox_->sent + outbox_->out.size() : 0;
}

// A reply goes straight to the socket, which does not block; what it does
// not take waits in the outbox, in order, until it is writable again
// (Flush). asio never holds a pointer into the outbox, so a closed
// connection frees its replies at once (Close), and a reply the socket
// takes whole costs neither a buffer nor a trip through the event loop.
void Connection::Send(std::string_view bytes) {
  if (closed) return;
  if (!CanQueue(bytes.size())) return host_.Drop(ConnectionPtr(this), "too many unread replies");
  if (outbox_) {
    outbox_->out.append(bytes);
  } else {
    size_t n = 0;
    if (!Write(bytes, n)) return;
    if (n == bytes.size()) return;
    outbox_ = std::make_unique<Outbox>();
    outbox_->sending.assign(bytes.substr(n));
    WaitWritable();
  }
  Book(false);
}

// Writes what the socket takes of `bytes` now: `n`. False when that failed
// and the connection was dropped.
bool Connection::Write(std::string_view bytes, size_t& n) {
  std::error_code ec;
  n = socket_.write_some(asio::buffer(bytes.data(), bytes.size()), ec);
  if (!ec) return true;
  n = 0;
  if (ec == asio::error::would_block || ec == asio::error::try_again) return true;
  bool quiet = ec == asio::error::broken_pipe || ec == asio::error::connection_reset;
  host_.Drop(ConnectionPtr(this), quiet ? "" : ec.message());
  return false;
}

void Connection::WaitWritable() {
  socket_.async_wait(Acceptor::Socket::wait_write, OnWritable{ConnectionPtr(this)});
}

void Connection::OnWritable::operator()(std::error_code ec) const {
  if (self->closed) return;
  if (ec) return self->host_.Drop(self, ec.message());
  self->Flush();
}

// Large queues are booked with the host, which bounds what all of its
// connections' unread replies hold (pressure.h), with, while a connection
// is held back, the requests it sent meanwhile; small ones cost nothing.
// A relay's link is not: it carries a node's every client, proved the job
// token, and closing it for another's unread replies would fail the node.
void Connection::Book(bool drained) {
  if (link) return;
  const size_t queued = Unsent() + (held_back_ && parser_ ? parser_->held() : 0);
  if (!booked_ && queued < kBookedReplyBytes) return;
  booked_ = queued >= kBookedReplyBytes;
  host_.RepliesQueued(*this, booked_ ? queued : 0, drained);
}

// Its socket is writable: writes what waits until the socket takes no
// more (then waits again) or nothing is left (the outbox goes: an idle
// connection holds no buffer).
void Connection::Flush() {
  while (true) {
    Outbox& o = *outbox_;
    if (o.sent == o.sending.size()) {
      if (o.out.empty()) {
        outbox_.reset();
        break;
      }
      o.sending.swap(o.out);
      std::string().swap(o.out);
      o.sent = 0;
    }
    size_t n = 0;
    if (!Write(std::string_view(o.sending).substr(o.sent), n)) return;
    o.sent += n;
    if (o.sent < o.sending.size()) {
      WaitWritable();
      break;
    }
  }
  Book(true);
  if (closing && !Sending()) return host_.Drop(ConnectionPtr(this), "");
  if (held_back_ && !Backlogged()) Resume();
}

void Connection::Close() {
  if (closed) return;
  closed = true;
  std::error_code ec;
  socket_.shutdown(Acceptor::Socket::shutdown_both, ec);
  socket_.close(ec);
  // Its replies go now, not when a handler runs: a flood of clients closed
  // for their unread replies would hold them all until the loop got to
  // them.
  outbox_.reset();
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
