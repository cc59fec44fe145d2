// StoreServer: a key-value store that speaks PyTorch's TCPStore protocol
// (both generations, detected per connection), so real torch workers can use
// it as their TCPStore, and trun's own rendezvous can build on it.
//
// It runs on the caller's asio io_context: the agent hosts it on its own
// event loop, `trun store` on a loop of its own. Every connection is a small
// state machine: bytes -> RequestParser -> admission -> handler -> queued
// reply (connection.h, admission.h, handlers.h). What the store holds, and
// the WAITs, barriers and watchers that its changes wake, is the keyspace's
// (keyspace.h): waiters are indexed by key, so a SET touches only its own
// waiters. A relay's link (link.h) carries many connections as streams,
// which link_host.h keeps. The accept loop is common/acceptor.h. Limits
// (parser.h) bound what one connection may make the server hold; a client
// that breaks the protocol or a limit is dropped with one log line and
// nobody else notices.
//
// A request is judged by the admission rule (admission.h) as soon as its
// keys are parsed, before its value is read. Requests not yet whole are
// bounded in total and held to a rate floor (pressure.h): a request must
// receive 64 KiB in every 10 s it stays unfinished, so a client that starts
// a request and trickles it is closed within about 10 s, while a worker's
// large SET over a slow link still goes through.
//
// Thread-safety: every method, and every handler, runs on the io_context's
// one thread (server_thread.h gives it a thread of its own).
#pragma once

#include <array>
#include <asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/allowlist.h"
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
  // Bytes of replies that all connections may have queued, unread
  // (pressure.h): over it, the connection whose replies went longest
  // unread is closed, once they sat there a second (at once over twice
  // it). A burst of large replies to readers passes.
  size_t max_queued_reply_bytes = 4 * kDefaultMaxBufferedBytes;
  // Bytes that requests not yet whole may hold over all connections
  // (pressure.h): over it, the connection whose request waited longest for
  // its next byte is closed. One request of the largest size a connection
  // may buffer always fits; thousands of clients that each start a large
  // SET and never finish it hold this much at most.
  size_t max_partial_bytes = kDefaultMaxBufferedBytes;
  // Connections served at once. 0: the open-file limit at start less a
  // reserve (1/64 of it, at least 256) that the process keeps for its
  // own work, the agent's workers, files and connections. At the cap, a new
  // connection closes the oldest one that has sent nothing yet (a flood of
  // idle connections gives way to newcomers, the agents' own included), or
  // is closed itself where every connection has spoken.
  size_t max_connections = 0;
  // Raise the process's soft open-file limit to the hard one at start, so
  // that thousands of clients can connect (torch's server does not, and
  // meets EMFILE at about 1000 ranks under the common default of 1024).
  bool raise_open_file_limit = true;
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
  // Reply bytes booked as queued, unread (pressure.h's QueuedReplies).
  size_t queued_reply_bytes() const;
  // WAITs not yet answered, cancelled or dropped; and the entries of the
  // key -> waiters index (which a cancel may leave behind for a while, but
  // never unboundedly). For tests.
  size_t num_waits() const;
  size_t num_wait_index_entries() const;
  // Bytes the connections' buffers hold, capacity included. For tests.
  size_t connection_buffer_bytes() const;

  // The rendezvous coordinator lives beside the server, on its loop, and
  // learns of its nodes' messages as they arrive instead of polling.
  // `observer` hears of every change to a key under `prefix` (SET, ADD,
  // COMPARE_SET that set, APPEND, MULTI_SET) with the id of the connection
  // that made it (0: a local Set below) and the key's new value;
  // `on_disconnect` hears of every connection that closed. Both run as
  // their own handlers on the loop, after the request that caused them, so
  // they may change keys themselves. One observer per server.
  using Observer =
      std::function<void(uint64_t conn, const std::string& key, const std::string& value)>;
  void Observe(std::string prefix, Observer observer, std::function<void(uint64_t)> on_disconnect);
  // Local access, as a client's GET (without waiting), SET and COMPARE_SET:
  // waiters and watchers are woken as for a client's request.
  std::optional<std::string> Get(const std::string& key) const;
  void Set(const std::string& key, std::string value);
  std::string CompareSet(const std::string& key, const std::string& expected, std::string desired);
  // Between two rounds of a job, once the last round's workers are gone:
  // closes every connection that used a key outside trun's (a worker's; a
  // relay's link excepted) without reading what it sent since, then erases
  // every key and queue whose name does not start with `keep_prefix`,
  // without waking or telling anyone; returns how many keys. torch 2.x's
  // workers use the agent's store without a per-attempt prefix (torch 1.13
  // put theirs under /worker/attempt_<N>), so a new round's workers would
  // otherwise read the last round's keys, such as gloo's peer addresses.
  size_t ForgetLastRound(const std::string& keep_prefix);
  // nullopt (the default): everyone is served. Otherwise only as
  // `allowlist` says; connections already open from a peer it no longer
  // allows are closed (or, with a strangers_prefix, kept to that prefix
  // unless they already used a key outside it). Returns how many closed.
  size_t SetAllowlist(std::optional<Allowlist> allowlist);
  // Non-empty: trun's keys (/trun/...) are served only to connections that
  // have shown this job token (auth.h), by the admission rule of every
  // request (admission.h): any other connection that names one is closed,
  // and LIST_KEYS and GETNUMKEYS leave them out for it. A refused proof
  // closes its connection; refusals are logged at most once a minute per
  // source address and reason. torch's clients, which never use trun's
  // keys, are unaffected. Empty (the default): no token is asked for.
  void RequireJobToken(std::string token);
  // Where the open connection `conn` (an Observer's id) comes from, as the
  // store saw it at accept: its peer address, never one the client names.
  // nullopt once it closed.
  std::optional<asio::ip::address> PeerOf(uint64_t conn) const;
  // Connections refused at accept, dropped for a key outside the strangers'
  // prefix or for trun's keys without the job token, or refused a proof,
  // since start. For tests and /metrics.
  uint64_t num_refused() const;

 private:
  class Impl;
  explicit StoreServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// Totals over every StoreServer of this process, for the agent's /metrics:
// the agent reaches its store only through the rendezvous, and a store taken
// over after its host died is a new server whose counts must add up.
// Thread-safety: any thread (relaxed atomic counters).
struct StoreStats {
  std::array<uint64_t, kNumOps> requests{};  // handled, by Op
  uint64_t connections_accepted = 0;
  uint64_t connections_closed = 0;
  uint64_t clients_dropped = 0;  // for breaking the protocol or a limit
  uint64_t clients_refused = 0;  // not on the allowlist (SetAllowlist)
  uint64_t links_opened = 0;     // relays' links (link.h), each one connection
  uint64_t links_closed = 0;
};
StoreStats ProcessStoreStats();

}  // namespace trun::store
