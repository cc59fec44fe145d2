// LinkHost: the store's side of the relays' links (link.h). It owns the
// links and their streams: it cuts a link's bytes into frames, opens and
// closes streams, feeds each stream's parser, and keeps the map from a
// stream's keyspace owner id to its link and stream, so that a WAIT's or a
// watch's news for that owner goes down the right stream. What a request
// means, whether it is allowed, and the connections themselves are the
// server's (server.h), which LinkHost reaches through LinkServer.
//
// Thread-safety: every method runs on the server's io_context thread, as
// the server's own do; none may be called from another.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "store/admission.h"
#include "store/connection.h"
#include "store/handlers.h"
#include "store/keyspace.h"
#include "store/link.h"
#include "store/parser.h"

namespace trun::store {

// What a LinkHost needs of the server that owns it.
class LinkServer {
 public:
  virtual ~LinkServer() = default;
  // A keyspace owner id for a new stream, from the sequence of the
  // server's connection ids.
  virtual uint64_t NewOwner() = 0;
  // The admission rule's verdict on a stream's request (admission.h).
  virtual Admission AdmitStreamRequest(const Request& r) = 0;
  // Handles an admitted request for keyspace owner `owner`, carried by
  // link `c` (handlers.h).
  virtual Outcome HandleFor(const ConnectionPtr& c, uint64_t owner, Request& r, bool untrun) = 0;
  // Closes the link's connection `c` and forgets it; `why` is logged.
  virtual void Drop(const ConnectionPtr& c, const std::string& why) = 0;
  // A stream was closed for `why`: counted among the dropped clients, and
  // `line` logged as the server limits its refusal lines.
  virtual void StreamDropped(const asio::ip::address& peer, const std::string& why,
                             const std::string& line) = 0;
};

class LinkHost {
 public:
  // `server` and `keys` outlive the LinkHost; `limits` bound each stream's
  // parser as they bound a connection's.
  LinkHost(LinkServer& server, Keyspace& keys, const Limits& limits)
      : server_(server), keys_(keys), limits_(limits) {}

  // The handshake's last step: a connection that proved the job token
  // (where the store asks for one; the server's admission refused it
  // otherwise) asks to become a link.
  void Open(const ConnectionPtr& c, const Request& r);
  // `n` bytes of link `c`, which are frames. False when `c` was closed or
  // is no link.
  bool Bytes(const ConnectionPtr& c, const char* data, size_t n);
  // The link whose connection `conn` was dropped: its streams' WAITs and
  // watches are forgotten with it. Nothing where `conn` was no link.
  void Forget(uint64_t conn);
  // Forgets every link, as the server closes.
  void Clear();

  // A WAIT of keyspace owner `owner` is done, `by_push` a QUEUE_PUSH;
  // `reply` is what a connection of its own would be sent. Nothing where
  // `owner` is no stream.
  void WaitDone(uint64_t owner, bool by_push, std::string_view reply);
  // Sends `bytes` down the stream that keyspace owner `owner` is, if it
  // is one.
  void SendTo(uint64_t owner, std::string_view bytes);
  // What `c` holds of requests not yet whole (pressure.h): its parser's,
  // or, for a link, its streams' and its undecoded frames'.
  size_t HeldBy(const Connection& c) const;

 private:
  // One TCPStore connection carried by a link: what the store keeps for a
  // real connection, under an owner id of its own.
  struct Stream {
    uint64_t owner = 0;
    uint32_t id = 0;
    bool shared = false;   // opened with kOpenShared
    std::string wait_key;  // a shared stream's: the key its WAIT names
    RequestParser parser;
    explicit Stream(const Limits& limits) : parser(limits) {}
  };
  using Streams = std::unordered_map<uint32_t, std::unique_ptr<Stream>>;
  struct Link {
    // The link's connection, which the server keeps until Forget.
    Connection* conn = nullptr;
    FrameDecoder frames;
    Streams streams;
    size_t held = 0;  // bytes its streams' parsers hold
  };

  void OnFrame(const ConnectionPtr& c, Link& link, Frame& f);
  Stream* OpenStream(const ConnectionPtr& c, Link& link, uint32_t id, bool shared);
  void ForgetStream(Link& link, Streams::iterator it);
  void CloseStream(const ConnectionPtr& c, Link& link, Stream& s, const std::string& why);
  bool HandleStreamRequest(const ConnectionPtr& c, Link& link, Stream& s, Request& r);
  std::pair<Connection*, Stream*> StreamOf(uint64_t owner);

  LinkServer& server_;
  Keyspace& keys_;
  const Limits& limits_;
  std::unordered_map<uint64_t, Link> links_;  // by connection id
  // A stream's keyspace owner id -> its link's connection id and stream id.
  std::unordered_map<uint64_t, std::pair<uint64_t, uint32_t>> stream_owners_;
};

// Links opened and closed by every store of this process, for
// ProcessStoreStats (server.h). Thread-safety: any thread (relaxed atomic
// counters).
struct LinkCounts {
  uint64_t opened = 0;
  uint64_t closed = 0;
};
LinkCounts ProcessLinkCounts();

}  // namespace trun::store
