// Relay: a node's fan-in to the job's store (issue 31). It accepts the
// node's workers' TCPStore connections (torch 1.13's protocol v1 and 2.x's
// v2, parsed by the store's own RequestParser) and carries their requests
// to the job's store over ONE connection, a link (link.h), so that the
// store holds one connection per node instead of one per rank.
//
// Every client has a stream of its own on the link, on which the store
// keeps what it would keep for the client's own connection: whatever a
// request means there (CANCEL_WAIT, WATCH_KEY, BARRIER, queues, several
// outstanding WAITs) it means through the relay. Three requests are shared
// between the node's clients instead:
// - ADD: ADDs of one key that arrive while one of that key is on its way
//   are sent as one ADD of their sum; each client still gets its own value
//   back, as if they had come one after the other (AddBatch below).
// - WAIT: one upstream WAIT per key, on a stream of its own, stands for
//   every local client that waits on the key; its answer releases them all
//   (a QUEUE_PUSH's, which serves one blocking pop, releases one).
// - GET: a GET of a key that a GET on its way already asks for gets that
//   one's answer, provided nothing went up or came down the link since it
//   was sent (so a client that learned of a newer value through the store,
//   a WAIT answered for instance, never reads an older one).
//
// Order. A client's requests take effect in the store in the order it sent
// them, and their answers reach it in the store's order, whether it waits
// for each answer (torch's clients) or sends its next request first
// (pipelines). The link is one ordered byte stream each way, and the store
// takes its frames one after the other and answers each request as it
// takes it, so whatever goes up at once needs no more; the rule is kept
// where the relay delays, shares or answers a request itself:
// - a client's ADD that waits in its key's batch goes up before the
//   client's next request, whatever that is: with its batch if no ADD of
//   the key is on its way, else alone on the client's own stream;
// - a GET shares an earlier one's answer only if nothing crossed the link
//   since that one went up (so none of the client's requests went up
//   after it);
// - a WAIT shares an upstream WAIT only if the client's latest request
//   went up before it, or was answered, or went up before a request that
//   was (an upstream WAIT's answer may be on its way down and the key gone
//   again by the time the client's request takes effect); otherwise it
//   goes up on the client's own stream;
// - PING, a WAIT of no keys and CANCEL_WAIT are answered by the relay only
//   when every earlier request of the client is settled in that sense;
//   otherwise PING and the empty WAIT go up on the client's own stream,
//   and CANCEL_WAIT's answer waits for one the store gives on the shared
//   stream after the client's earlier requests (a local WAIT released
//   meanwhile gets its answer first, as the store would send it).
// A client that batches nothing pipelined keeps every benefit: torch's
// clients send one request and wait for its answer (SET, which has none,
// aside). The one exception: a client the relay closes (a request naming
// trun's keys, a bad VALIDATE) is closed at once, its answers still on
// their way lost, where the store would send them first.
//
// The relay applies the store's admission rule to its clients itself: it
// listens on the loopback address only (the node's own processes; no other
// host reaches it, which is what the store's allow-list would decide for
// them), and a client that names trun's keys (/trun/) is closed, as the
// store closes a connection without the job token. The relay itself proves
// the job token to the store (auth.h) before it asks for the link.
//
// When the link breaks, every client is closed (the workers fail, and the
// agent starts them again with a new relay for the next round).
//
// Thread-safety: every method, and every handler, runs on the io_context's
// one thread.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/parser.h"

namespace trun::store {

struct RelayOptions {
  // Where the relay listens: the loopback address ("127.0.0.1") unless a
  // test or tool says otherwise; port 0 picks a free one.
  std::string host = "127.0.0.1";
  int port = 0;
  // The job's store, and the job token it asks for ("" where it asks for
  // none).
  std::string store_host;
  int store_port = 0;
  std::string job_token;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  Limits limits;
  // Bytes that its clients' requests not yet whole may hold over all of
  // them, and their rate floor, as at the store (ServerOptions, pressure.h).
  size_t max_partial_bytes = kDefaultMaxBufferedBytes;
  // And replies left unread, as ServerOptions::max_queued_reply_bytes.
  size_t max_queued_reply_bytes = 4 * kDefaultMaxBufferedBytes;
  // Raise the process's open-file limit at start (as the store does).
  bool raise_open_file_limit = true;
};

// What a relay sent upstream and served locally, for tests and tools.
struct RelayStats {
  uint64_t clients = 0;         // connections accepted
  uint64_t upstream_adds = 0;   // ADDs sent up
  uint64_t local_adds = 0;      // ADDs its clients sent
  uint64_t upstream_waits = 0;  // WAITs sent up
  uint64_t local_waits = 0;     // WAITs its clients sent
  uint64_t upstream_gets = 0;   // GETs sent up
  uint64_t local_gets = 0;      // GETs its clients sent
  uint64_t forwarded = 0;       // other requests forwarded on clients' streams
};

class Relay {
 public:
  // Connects to the store (retrying until connect_timeout), proves the job
  // token and opens the link: the link's socket, which Serve takes. Blocks;
  // any thread (an agent that hosts the store runs it off its loop, which
  // serves the other end).
  static Result<int> Handshake(const RelayOptions& options);
  // Listens for clients and serves them through `link_fd` (Handshake's), on
  // `io`. Takes the socket, also on failure.
  static Result<std::unique_ptr<Relay>> Serve(asio::io_context& io, RelayOptions options,
                                              int link_fd);
  // Handshake, then Serve: for a store on another thread or process.
  static Result<std::unique_ptr<Relay>> Start(asio::io_context& io, RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  int port() const;
  size_t num_clients() const;
  // Whether the link to the store is up.
  bool linked() const;
  RelayStats stats() const;

  class Impl;

 private:
  explicit Relay(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// ADD batching's arithmetic: ADDs of deltas d1..dn sent up as one ADD of
// their sum s, answered v (the key's count after all of them), are answered
// v - s + d1, v - s + d1 + d2, ..., v: each client its own value, as if the
// ADDs had reached the store one after the other in their order of
// arrival (so with deltas of 1 the values are distinct and contiguous).
// Sums wrap at 64 bits, as the store's do.
std::vector<int64_t> SplitAddResult(int64_t upstream_value, const std::vector<int64_t>& deltas);

}  // namespace trun::store
