// Connection: one client of the store, as bytes on a socket. It reads
// through the server's shared buffer when its socket is readable, feeds the
// RequestParser, hands each whole
// request to its ConnectionHost (the server), and queues the replies, one
// write in flight at a time. What a request means, and whether it is
// allowed, is the host's business; this file only moves bytes.
//
// Ownership: a Connection is counted by ConnectionPtr, a reference whose
// count lives in the object. Its host holds one while it serves it, and
// its pending wait and write each hold one, so that a connection the host
// dropped lives until asio has run (or destroyed) their handlers. The
// connection does not keep its host alive: a host closes every connection
// it holds before it goes (Close), and a closed connection's handlers never
// reach its host.
//
// Thread-safety: every method, and every handler it starts, runs on the
// io_context's one thread; the count is not atomic.
#pragma once

#include <array>
#include <asio.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/acceptor.h"
#include "store/parser.h"

namespace trun::store {

class Connection;

// A connection with this many reply bytes waiting for its client to read
// them handles no more of its requests until they drain (Connection.cc,
// Backlogged, says why).
inline constexpr size_t kHoldBackReplyBytes = 1024 * 1024;

// A counted reference to a Connection (see Ownership above). 8 bytes, where
// a shared_ptr is 16 and costs the object a control block and
// enable_shared_from_this's weak pointer (32 bytes more).
class ConnectionPtr {
 public:
  ConnectionPtr() = default;
  // A new reference to `c` (or none).
  explicit ConnectionPtr(Connection* c);
  ConnectionPtr(const ConnectionPtr& o) : ConnectionPtr(o.c_) {}
  ConnectionPtr(ConnectionPtr&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  ConnectionPtr& operator=(ConnectionPtr o) noexcept {
    std::swap(c_, o.c_);
    return *this;
  }
  ~ConnectionPtr();

  using element_type = Connection;

  Connection* get() const { return c_; }
  Connection* operator->() const { return c_; }
  Connection& operator*() const { return *c_; }
  explicit operator bool() const { return c_ != nullptr; }

 private:
  Connection* c_ = nullptr;
};

// What a Connection needs of the server that accepted it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // A whole request arrived.
  virtual void Handle(const ConnectionPtr& c, Request& r) = 0;
  // After each read, once its whole requests were handled: `arrived` bytes
  // came. False when `c` was closed (its unfinished request refused, or
  // over the budget of unfinished requests).
  virtual bool AfterRead(const ConnectionPtr& c, size_t arrived) = 0;
  // Closes `c` and forgets it; `why` ("" for an ordinary end) is logged.
  virtual void Drop(const ConnectionPtr& c, const std::string& why) = 0;
  // The first byte `c` sent since accept.
  virtual void Spoke(Connection& c) = 0;
  // Bytes of a connection that became a relay's link (link.h): frames, not
  // requests. False when `c` was closed. Only the store's connections
  // become links.
  virtual bool LinkBytes(const ConnectionPtr& c, const char* data, size_t n) = 0;
  // What every connection of the host shares, asked for here rather than
  // kept in each: the limits on what one may make the host hold (parser.h,
  // and the reply bytes one may have queued), and the buffer their reads
  // go through (one thread, and the bytes are copied into the parser
  // before anything else runs).
  virtual const Limits& limits() const = 0;
  virtual size_t max_pending_reply_bytes() const = 0;
  // `c` has `queued` reply bytes queued (0: fewer than kBookedReplyBytes,
  // pressure.h); `drained`: some reached its socket since the last call.
  virtual void RepliesQueued(Connection& c, size_t queued, bool drained) = 0;
  virtual std::array<char, 64 * 1024>& read_buf() = 0;
};

// What an idle connection holds is what a store with thousands of clients
// pays per client (bench/RESULTS.md), so everything a connection needs only
// now and then lives outside the object until then: the parser while a
// request is on its way (an idle connection that has spoken holds none), the
// reply buffers while a reply is; the job token's nonce is the server's.
// The rest is packed (the peer's address as 20 bytes, the flags as bits) to
// fit the allocator's 128-byte chunk.
class Connection {
 public:
  // A connection of `host`, which must close it (Close) before it goes.
  static ConnectionPtr Make(ConnectionHost& host, Acceptor::Socket socket, uint64_t id,
                            const asio::ip::address& peer);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

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
  bool Sending() const { return outbox_ != nullptr; }
  // Closes the socket (once).
  void Close();
  // What this connection's buffers hold, capacity included.
  size_t BufferBytes() const;
  // "address:port" of the peer, or "?" once the socket cannot tell.
  std::string RemoteName(asio::ip::address* address) const;
  // The parser of the request on its way: nullptr between requests.
  const RequestParser* parser() const { return parser_.get(); }
  // What its parser holds as a request not yet whole, for the budget and
  // rate floor of unfinished requests (pressure.h): none while it is held
  // back (Backlogged), when what the parser holds waits for the store, not
  // for the client, and counts with its unread replies instead (Book).
  size_t UnfinishedBytes() const { return parser_ && !held_back_ ? parser_->held() : 0; }
  // The protocol generation its bytes so far are in.
  Generation generation() const { return parser_ ? parser_->generation() : generation_; }
  // Where it comes from, as accept saw it (IPv4 unmapped), for the server's
  // admission (admission.h, auth.h).
  asio::ip::address peer() const;

  const uint64_t id;
  // The host's intrusive list of connections (the store's: those that sent
  // nothing yet, oldest first), two pointers here rather than a node of a
  // container per connection.
  Connection* list_prev = nullptr;
  Connection* list_next = nullptr;

  // The fields are in order of alignment, the public ones among them, so
  // that there is no padding: 120 bytes, the allocator's 128-byte chunk.
 private:
  friend class ConnectionPtr;

  // The replies its socket did not take yet: `sending`, written up to
  // `sent`, then `out`. It exists only while there are some.
  struct Outbox {
    std::string sending;
    size_t sent = 0;
    std::string out;
  };
  // The handler of the wait until its socket is writable again.
  struct OnWritable {
    ConnectionPtr self;
    void operator()(std::error_code ec) const;
  };
  // The handler of the pending wait: one reference, so that asio's
  // operation holds 8 bytes of it.
  struct OnWait {
    ConnectionPtr self;
    void operator()(std::error_code ec) const;
  };

  Connection(ConnectionHost& host, Acceptor::Socket socket, uint64_t id,
             const asio::ip::address& peer);
  void Read();
  void OnReadError(std::error_code ec);
  void OnReadable();
  bool Write(std::string_view bytes, size_t& n);
  void WaitWritable();
  size_t Unsent() const;
  bool Consume(const char* data, size_t n);
  bool Parse(const char* data, size_t n);
  bool HandleParsed();
  void ReleaseIdleParser();
  bool Backlogged() const;
  void Resume();
  void Flush();
  void Book(bool drained);

  ConnectionHost& host_;
  Acceptor::Socket socket_;
  std::unique_ptr<RequestParser> parser_;
  std::unique_ptr<Outbox> outbox_;
  asio::ip::address_v6 peer_;  // an IPv4 peer as IPv4-mapped
  uint32_t refs_ = 0;

 public:
  // What the server's admission keeps for it (admission.h, auth.h).
  uint32_t judged_args = 0;  // args of the unfinished request already judged
  bool listed : 1 = false;   // on the host's list (list_prev, list_next)
  bool closed : 1 = false;
  // Refused: its last answer is on its way, then it is closed, and nothing
  // more it sent is read.
  bool closing : 1 = false;
  bool stranger : 1 = false;          // kept to the allowlist's strangers_prefix
  bool used_other_keys : 1 = false;   // a request outside that prefix
  bool used_worker_keys : 1 = false;  // a request outside trun's keys (admission.h)
  bool proven : 1 = false;            // showed the job token (auth.h)
  // A relay's link (link.h): every byte after the handshake's answer is a
  // frame, for the host's LinkBytes.
  bool link : 1 = false;

 private:
  Generation generation_ = Generation::kUnknown;  // while parser_ is null
  bool spoke_ : 1 = false;                        // sent a byte since accept
  bool booked_ : 1 = false;                       // its replies are booked with the host (Book)
  // Its requests wait until its replies drain (Backlogged).
  bool held_back_ : 1 = false;
};

// Connections in the order they were added, on their own list hooks
// (Connection::list_prev, list_next): a store of thousands of silent
// clients pays two pointers for each rather than a std::set node.
class ConnectionList {
 public:
  Connection* front() const { return head_; }
  void PushBack(Connection& c) {
    c.list_prev = tail_;
    c.list_next = nullptr;
    (tail_ ? tail_->list_next : head_) = &c;
    tail_ = &c;
    c.listed = true;
  }
  // Takes `c` off the list; nothing where it is not on it.
  void Erase(Connection& c) {
    if (!c.listed) return;
    (c.list_prev ? c.list_prev->list_next : head_) = c.list_next;
    (c.list_next ? c.list_next->list_prev : tail_) = c.list_prev;
    c.list_prev = c.list_next = nullptr;
    c.listed = false;
  }

 private:
  Connection* head_ = nullptr;
  Connection* tail_ = nullptr;
};

inline ConnectionPtr::ConnectionPtr(Connection* c) : c_(c) {
  if (c_) ++c_->refs_;
}

inline ConnectionPtr::~ConnectionPtr() {
  if (c_ && --c_->refs_ == 0) delete c_;
}

}  // namespace trun::store
