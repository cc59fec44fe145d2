// The link between a node's relay (relay.h) and the job's store: one TCP
// connection that carries many TCPStore connections ("streams") at once,
// each frame naming the stream it belongs to. The store keeps, per stream,
// everything it keeps for a real connection (its parser, its WAITs, its
// watches), so whatever a worker's request means on a connection of its own
// it means on its stream. docs/store-protocol.md#the-relays-link has the
// byte grammar and the handshake that turns a connection into a link.
//
// Thread-safety: pure functions; a FrameDecoder is one link's, used by one
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/parser.h"

namespace trun::store {

// The handshake: after the job token's exchange (auth.h), the relay sends
// COMPARE_SET kLinkKey expected "" desired kLinkVersion; a store that
// takes the link answers kLinkVersion, and every later byte either way is a
// frame.
inline constexpr const char* kLinkKey = "/trun/link";
inline constexpr const char* kLinkVersion = "trun-link-v1";

// frame = u8 kind, u32 stream, u32 length, length bytes
enum class FrameKind : uint8_t {
  kData = 0,        // bytes of the stream: requests up, replies down
  kClose = 1,       // the stream is over (empty): its client went, or the
                    // store dropped it
  kOpenShared = 2,  // up, empty, before the stream's first bytes: its WAITs
                    // stand for several of the relay's clients
  kWokeOne = 3,     // down, empty: a shared stream's WAIT was completed by a
                    // QUEUE_PUSH, whose item serves one waiter
};
inline constexpr size_t kFrameHeaderBytes = 9;
// A frame's payload: the relay cuts a larger request into several.
inline constexpr size_t kMaxFramePayload = 256 * 1024;
// Streams open at once on one link: a node's clients and the relay's
// shared streams, with room to spare.
inline constexpr size_t kMaxLinkStreams = 4096;

// The relay's next stream id, from `next`, which it advances. Ids wrap at
// 2^32, which a local client can reach (a WAIT on 2,047 keys opens a stream
// for each: about 2 million such WAITs), so the id after a wrap skips 0,
// which names no stream, and every id `in_use` says is still open: the
// store would take it for that stream's, mixing two clients' requests, or,
// for a shared WAIT's open, drop the link with every client of the node.
// At most kMaxLinkStreams are open, so the skipping ends soon.
template <typename InUse>
uint32_t NextStreamId(uint32_t& next, InUse in_use) {
  uint32_t id = next++;
  while (id == 0 || in_use(id)) id = next++;
  return id;
}

struct Frame {
  FrameKind kind = FrameKind::kData;
  uint32_t stream = 0;
  std::string payload;
};

// Appends one frame, or several kData frames where `payload` is larger
// than kMaxFramePayload.
void PutFrames(std::string& o, FrameKind kind, uint32_t stream, std::string_view payload);

// Cuts a link's byte stream into frames. A frame of an unknown kind, or
// with a payload over kMaxFramePayload (judged from its header, before its
// bytes are waited for), is an error: the link is broken.
class FrameDecoder {
 public:
  enum class Result { kFrame, kNeedMore, kError };
  void Append(const char* data, size_t n);
  Result Next(Frame* out);
  const std::string& error() const { return error_; }
  // Bytes received and not yet decoded.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace trun::store
