// Connection: one client of the store, as bytes on a socket. It reads
// through the server's shared buffer when its socket is readable, feeds the
// RequestParser, hands each whole
// request to its ConnectionHost (the server), and queues the replies, one
// write in flight at a time. What a request means, and whether it is
// allowed, is the host's business; this file only moves bytes.
//
// Thousands of connections mostly sit idle, so an idle one holds only what
// it needs between requests: this object (about 100 bytes) and its
// socket's registration in the host's Poller (poller.h), not asio's state
// for a socket and a pending read. Its parser, reply buffers and the job
// token's nonce live in a side part (InFlight) that exists only while a
// request or a reply is under way, or a nonce awaits its proof.
//
// Replies to the requests of one read go out together after it, in one
// write; a reply sent at another time (a WAIT woken by another client's
// SET) is written at once. What the socket does not take waits for it to
// be writable. A failed write drops the connection from a handler of its
// own, never inside the Send that met it.
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

#include "store/parser.h"
#include "store/poller.h"

namespace trun::store {

class Connection;

// What every connection of one host shares; the host owns it (each
// connection keeps its host alive).
struct ConnectionShared {
  explicit ConnectionShared(asio::io_context& io) : poller(io) {}

  Poller poller;  // watches every connection's socket
  Limits limits;
  // Bytes of replies one connection may have queued before it is dropped.
  size_t max_pending_reply_bytes = kDefaultMaxBufferedBytes;
  // For every connection's reads: one thread, and the bytes are copied into
  // the connection's parser before anything else runs.
  std::array<char, 64 * 1024> read_buf;
};

// What a Connection needs of the server that accepted it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // What its connections share.
  virtual ConnectionShared& shared() = 0;
  // The open connection `id`, for its socket's events; nullptr once it
  // closed.
  virtual std::shared_ptr<Connection> Find(uint64_t id) = 0;
  // A whole request arrived.
  virtual void Handle(const std::shared_ptr<Connection>& c, Request& r) = 0;
  // After each read, once its whole requests were handled: `arrived` bytes
  // came. False when `c` was closed (its unfinished request refused, or
  // over the budget of unfinished requests).
  virtual bool AfterRead(const std::shared_ptr<Connection>& c, size_t arrived) = 0;
  // Closes `c` and forgets it; `why` ("" for an ordinary end) is logged.
  virtual void Drop(const std::shared_ptr<Connection>& c, const std::string& why) = 0;
  // The first byte `c` sent since accept.
  virtual void Spoke(const Connection& c) = 0;
  // Bytes of a connection that became a relay's link (link.h): frames, not
  // requests. False when `c` was closed. Only the store's connections
  // become links.
  virtual bool LinkBytes(const std::shared_ptr<Connection>& c, const char* data, size_t n) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Takes `socket`'s descriptor from asio. `keep_host` keeps the host
  // alive for handlers still queued after the server is destroyed.
  // `peer`: where the client comes from, as the acceptor saw it.
  Connection(std::shared_ptr<ConnectionHost> keep_host, asio::ip::tcp::socket socket, uint64_t id,
             const asio::ip::address& peer);
  ~Connection();

  // Starts reading: the host's Poller watches its socket from now on.
  void Start();
  // What the Poller saw on its socket (epoll events).
  void OnEvents(uint32_t events);
  // Whether `n` more reply bytes fit under the limit on what a connection
  // may have queued.
  bool CanQueue(size_t n) const;
  // Reply bytes it may still queue.
  size_t ReplyRoom() const;
  // Queues reply bytes; a connection over the limit is dropped.
  void Send(std::string_view bytes);
  // Whether a reply is queued or on its way.
  bool Sending() const;
  // Closes the socket (once).
  void Close();
  // What this connection's buffers hold, capacity included.
  size_t BufferBytes() const;
  // "address:port" of the peer, or "?" once the socket cannot tell.
  std::string RemoteName(asio::ip::address* address) const;

  // The protocol generation its first request showed (kUnknown before).
  Generation generation() const;
  // Bytes its parser holds: unparsed, and the fields of the request in
  // progress (RequestParser::held).
  size_t held() const;
  // The unfinished request (RequestParser::pending) when it has keys or
  // values that this call has not shown yet; nullptr otherwise. The
  // server judges each key once, as soon as it is parsed.
  const Request* NewlyParsedPending();
  // The job token's nonce it was given, until its proof uses it (auth.h).
  void SetAuthNonce(std::string nonce);
  // The nonce, now forgotten: a nonce is good for one proof. "" if none.
  std::string TakeAuthNonce();

  const uint64_t id;
  // Where it comes from, set at accept (admission.h).
  const asio::ip::address peer;
  bool closed : 1 = false;
  // Refused: its last answer is on its way, then it is closed, and nothing
  // more it sent is read.
  bool closing : 1 = false;
  // What the server's admission keeps for it (admission.h, auth.h).
  bool stranger : 1 = false;         // kept to the allowlist's strangers_prefix
  bool used_other_keys : 1 = false;  // a request outside that prefix
  bool proven : 1 = false;           // showed the job token (auth.h)
  // A relay's link (link.h): every byte after the handshake's answer is a
  // frame, for the host's LinkBytes.
  bool link : 1 = false;

 private:
  // Here, to share the word of the flags above.
  Generation generation_ = Generation::kUnknown;  // kept while busy_ is not
  bool writing_ : 1 = false;                      // replies wait for the socket to be writable
  bool in_read_ : 1 = false;                      // replies wait for the end of the read
  bool broken_ : 1 = false;                       // a write failed; its drop is on its way
  bool spoke_ : 1 = false;                        // sent a byte since accept
  int fd_ = -1;

  struct InFlight;

  void OnReadable();
  bool Consume(const char* data, size_t n);
  // Writes what is queued until the socket is full, then waits for it to
  // be writable. After a write failed, drops the connection from a handler
  // of its own.
  void Flush();
  // Writes `bytes` now; returns how many the socket took (all of them, or
  // fewer when it is full or the write failed).
  size_t WriteNow(std::string_view bytes);
  // Asks the Poller for what it waits on now: reads unless refused,
  // writability while replies wait.
  void Watch();
  // Drops it, from a handler of its own.
  void DropLater(std::string why);
  // The side part, made when first needed.
  InFlight& Busy();
  // Gives the side part back once it holds nothing.
  void ReleaseIfIdle();

  std::shared_ptr<ConnectionHost> host_;
  std::unique_ptr<InFlight> busy_;
};

}  // namespace trun::store
