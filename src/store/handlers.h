// The store's request handlers: one small function per operation, each
// reading or changing the keyspace (keyspace.h) and building the reply bytes
// that docs/store-protocol.md gives for it. No sockets: the server hands
// each whole, admitted request here and sends, or drops, as told.
//
// Thread-safety: as the Keyspace it is given (one thread).
#pragma once

#include <cstdint>
#include <string>

#include "store/keyspace.h"
#include "store/parser.h"

namespace trun::store {

// What the connection that sent a request is, as its handler needs it.
struct RequestContext {
  uint64_t conn = 0;      // the keyspace's owner id for its WAITs and watches
  bool untrun = false;    // leave trun's keys out of whole-store answers
  size_t reply_room = 0;  // reply bytes it may still have queued
};

// A handler's verdict for the connection that sent the request.
struct Outcome {
  enum Kind {
    kReply,  // send `bytes`
    kNone,   // nothing now (SET; a WAIT answered later)
    kDrop,   // close the connection; `bytes` says why
  };
  Kind kind = kNone;
  std::string bytes;
};

// Runs `r`'s handler; may move `r`'s args into the keyspace.
Outcome HandleRequest(Keyspace& keys, Request& r, const RequestContext& ctx);

}  // namespace trun::store
