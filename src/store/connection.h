// Connection: one client of the store, as bytes on a socket. It reads
// through the server's shared buffer when its socket is readable, feeds the
// RequestParser, hands each whole
// request to its ConnectionHost (the server), and queues the replies, one
// write in flight at a time. What a request means, and whether it is
// allowed, is the host's business; this file only moves bytes.
//
// Thread-safety: every method, and every handler it starts, runs on the
// io_context's one thread.
#pragma once

#include <array>
#include <asio.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/acceptor.h"
#include "store/parser.h"

namespace trun::store {

class Connection;

// What a Connection needs of the server that accepted it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // A whole request arrived.
  virtual void Handle(const std::shared_ptr<Connection>& c, Request& r) = 0;
  // After each read, once its whole requests were handled: `arrived` bytes
  // came. False when `c` was closed (its unfinished request refused, or
  // over the budget of unfinished requests).
  virtual bool AfterRead(const std::shared_ptr<Connection>& c, size_t arrived) = 0;
  // Closes `c` and forgets it; `why` ("" for an ordinary end) is logged.
  virtual void Drop(const std::shared_ptr<Connection>& c, const std::string& why) = 0;
  // The first byte `c` sent since accept.
  virtual void Spoke(Connection& c) = 0;
  // Bytes of a connection that became a relay's link (link.h): frames, not
  // requests. False when `c` was closed. Only the store's connections
  // become links.
  virtual bool LinkBytes(const std::shared_ptr<Connection>& c, const char* data, size_t n) = 0;
  // What every connection of the host shares, asked for here rather than
  // kept in each: the limits on what one may make the host hold (parser.h,
  // and the reply bytes one may have queued), and the buffer their reads
  // go through (one thread, and the bytes are copied into the parser
  // before anything else runs).
  virtual const Limits& limits() const = 0;
  virtual size_t max_pending_reply_bytes() const = 0;
  virtual std::array<char, 64 * 1024>& read_buf() = 0;
};

// What an idle connection holds is what a store with thousands of clients
// pays per client (bench/RESULTS.md), so everything a connection needs only
// now and then lives outside the object until then: the parser while a
// request is on its way (an idle connection that has spoken holds none), the
// reply buffers while a reply is, the job token's nonce until it is used.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `keep_host` keeps the host alive for handlers still queued after the
  // server is destroyed.
  Connection(std::shared_ptr<ConnectionHost> keep_host, Acceptor::Socket socket, uint64_t id);

  // Starts reading.
  void Start();
  // Whether `n` more reply bytes fit under the limit on what a connection
  // may have queued.
  bool CanQueue(size_t n) const;
  // Reply bytes it may still queue.
  size_t ReplyRoom() const;
  // Queues reply bytes; a connection over the limit is dropped.
  void Send(std::string_view bytes);
  // Whether a reply is queued or on its way.
  bool Sending() const { return writing_ || (outbox_ && !outbox_->out.empty()); }
  // Closes the socket (once).
  void Close();
  // What this connection's buffers hold, capacity included.
  size_t BufferBytes() const;
  // "address:port" of the peer, or "?" once the socket cannot tell.
  std::string RemoteName(asio::ip::address* address) const;
  // The parser of the request on its way: nullptr between requests.
  const RequestParser* parser() const { return parser_.get(); }
  // The protocol generation its bytes so far are in.
  Generation generation() const { return parser_ ? parser_->generation() : generation_; }

  const uint64_t id;
  // What the server's admission keeps for it (admission.h, auth.h).
  asio::ip::address peer;    // where it comes from, set at accept
  uint32_t judged_args = 0;  // args of the unfinished request already judged
  // The job token's nonce, from when it is asked for until it is used.
  std::unique_ptr<std::string> auth_nonce;
  // The host's intrusive list of connections (the store's: those that sent
  // nothing yet, oldest first), two pointers here rather than a node of a
  // container per connection.
  Connection* list_prev = nullptr;
  Connection* list_next = nullptr;
  bool listed = false;
  bool closed = false;
  // Refused: its last answer is on its way, then it is closed, and nothing
  // more it sent is read.
  bool closing = false;
  bool stranger = false;          // kept to the allowlist's strangers_prefix
  bool used_other_keys = false;   // a request outside that prefix
  bool used_worker_keys = false;  // a request outside trun's keys (admission.h)
  bool proven = false;            // showed the job token (auth.h)
  // A relay's link (link.h): every byte after the handshake's answer is a
  // frame, for the host's LinkBytes.
  bool link = false;

 private:
  // Replies queued (`out`) and the one write in flight (`sending`).
  struct Outbox {
    std::string out, sending;
  };

  void Read();
  void OnReadError(std::error_code ec);
  void OnReadable();
  bool Consume(const char* data, size_t n);
  bool Parse(const char* data, size_t n);
  void Flush();

  std::shared_ptr<ConnectionHost> host_;
  Acceptor::Socket socket_;
  std::unique_ptr<RequestParser> parser_;
  std::unique_ptr<Outbox> outbox_;
  Generation generation_ = Generation::kUnknown;  // while parser_ is null
  bool writing_ = false;
  bool spoke_ = false;  // sent a byte since accept
};

}  // namespace trun::store
