// StoreServer: a key-value store that speaks PyTorch's TCPStore protocol
// (both generations, detected per connection), so real torch workers can use
// it as their TCPStore, and trun's own rendezvous can build on it.
//
// It runs on the caller's asio io_context: the agent hosts it on its own
// event loop, `trun store` on a loop of its own. Every connection is a small
// state machine: bytes -> RequestParser -> handler -> queued reply. WAIT is
// answered when its last key appears; waiters are indexed by key, so a SET
// touches only its own waiters. Limits (parser.h) bound what one connection
// may make the server hold; a client that breaks the protocol or a limit is
// dropped with one log line and nobody else notices.
//
// Thread-safety: every method, and every handler, runs on the io_context's
// one thread.
#pragma once

#include <asio.hpp>
#include <memory>
#include <string>

#include "common/status.h"
#include "store/parser.h"

namespace trun::store {

struct ServerOptions {
  // "" or "::": every address, IPv6 and IPv4 (falls back to 0.0.0.0 where
  // IPv6 is off). Otherwise a literal address to bind.
  std::string host;
  int port = 0;  // 0: a free port
  Limits limits;
  // Bytes of replies one connection may have queued before it is dropped
  // (a client that never reads).
  size_t max_pending_reply_bytes = kDefaultMaxBufferedBytes;
};

class StoreServer {
 public:
  // Binds and starts accepting. The port is kept until the server is
  // destroyed, so restarts of the workers never meet EADDRINUSE.
  static Result<std::unique_ptr<StoreServer>> Start(asio::io_context& io, ServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  size_t num_keys() const;
  size_t num_connections() const;

 private:
  class Impl;
  explicit StoreServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// Raises the soft open-file limit to the hard one, so that thousands of
// clients can connect. Returns the new soft limit.
size_t RaiseOpenFileLimit();

}  // namespace trun::store
