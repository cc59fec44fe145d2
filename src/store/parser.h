// RequestParser: turns one connection's byte stream into requests, for
// either protocol generation, incrementally and within fixed limits.
//
// Bytes are appended as they arrive; a message may be split anywhere and
// several may come in one read. Every length is checked against the limits
// before the parser waits for the bytes it announces, so a hostile length
// (an nmap probe, 2^60) costs nothing: it is a protocol error at once.
//
// Thread-safety: one parser per connection, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "store/wire_format.h"

namespace trun::store {

// Operations, independent of how a generation numbers them.
enum class Op {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
};
// Every Op is below this; tables indexed by Op (the admission rule, the
// request counters) have this many rows.
inline constexpr size_t kNumOps = static_cast<size_t>(Op::kBarrier) + 1;

const char* OpName(Op op);

enum class Generation : uint8_t { kUnknown, kV1, kV2 };

// What a string holds on the heap: its capacity, less the bytes an empty
// string holds in itself (the short-string buffer).
inline size_t HeapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() : 0;
}

struct Limits {
  size_t max_key_bytes = kDefaultMaxKeyBytes;
  size_t max_value_bytes = kDefaultMaxValueBytes;
  size_t max_keys_per_request = kDefaultMaxKeysPerRequest;
  size_t max_buffered_bytes = kDefaultMaxBufferedBytes;
};

struct Request {
  Op op = Op::kSet;
  // Keys and values in wire order: SET key,value; COMPARE_SET key,expected,
  // desired; MULTI_SET k1,v1,k2,v2,...; CHECK/WAIT/MULTI_GET the keys.
  std::vector<std::string> args;
  int64_t number = 0;  // ADD's increment, BARRIER's world size
  uint32_t word = 0;   // VALIDATE's magic, PING's nonce
};

// Appends the bytes a client of generation `g` sends for `r` (as the
// parser made it), which the parser reads back as `r`: how a relay
// (relay.h) forwards a request. False, appending nothing, for an op `g`
// lacks (v1: VALIDATE, PING, the queues, LIST_KEYS, BARRIER; v2:
// WATCH_KEY).
bool EncodeRequest(Generation g, const Request& r, std::string& o);

class RequestParser {
 public:
  enum class Result { kRequest, kNeedMore, kError };

  // `known`: the generation of the connection's earlier requests, for a
  // parser made again after one was released between requests.
  explicit RequestParser(Limits limits = {}, Generation known = Generation::kUnknown)
      : limits_(limits), generation_(known) {}

  // Appends bytes. Returns false (and sets error()) when the connection
  // would hold more than limits.max_buffered_bytes: unparsed bytes plus the
  // decoded fields of the message in progress. That bounds one message as a
  // whole (a MULTI_SET of many large values), not only each field.
  bool Append(const char* data, size_t n);
  // The next complete request, if there is one.
  Result Next(Request* out);
  // After Next said kNeedMore: the request being parsed, with the keys and
  // values parsed so far (nullptr between requests). Its keys are whole
  // before its value is read, so the server judges them (admission.h)
  // before it buffers a value it would refuse.
  const Request* pending() const { return in_message_ ? &cur_ : nullptr; }

  Generation generation() const { return generation_; }
  const std::string& error() const { return error_; }
  // Bytes received and not yet parsed.
  size_t buffered() const { return buf_.size() - pos_ - (in_message_ ? cur_off_ : 0); }
  // What this parser holds for the connection: buffered() plus the decoded
  // fields of the message in progress.
  size_t held() const { return buffered() + cur_arg_bytes_; }
  // Bytes the parser's buffer has allocated: none once every byte in it is
  // parsed, so that an idle connection holds no buffer whatever it once
  // carried (thousands of ranks each reading a large value once would
  // otherwise each keep a copy's worth).
  size_t allocated() const { return HeapBytes(buf_); }

 private:
  // Each returns false when the bytes are not all there yet; a violation
  // sets error_.
  bool ReadU32(size_t& at, uint32_t& v);
  bool ReadU64(size_t& at, uint64_t& v);
  bool ReadBytes(size_t& at, size_t max, const char* what, std::string& out);
  Result Fail(std::string msg);

  Limits limits_;
  Generation generation_ = Generation::kUnknown;
  std::string buf_;
  size_t pos_ = 0;  // start of the message being parsed
  std::string error_;
  // The message being parsed survives between calls, field by field, so a
  // large request arriving in small pieces is parsed once, not re-parsed on
  // every piece.
  bool in_message_ = false;
  Request cur_;
  size_t cur_off_ = 0;        // bytes of it consumed, from pos_
  size_t cur_arg_bytes_ = 0;  // bytes of keys and values decoded into cur_
  uint64_t fields_done_ = 0;
  uint64_t fields_total_ = 0;
};

}  // namespace trun::store
