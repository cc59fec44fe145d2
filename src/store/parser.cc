#include "store/parser.h"

#include <fmt/format.h>

#include <cstring>

#include "store/encode.h"

namespace trun::store {
namespace {

// Opcode byte -> operation, per generation; false for a byte the generation
// does not define. v1 never yields VALIDATE: its byte 0 is SET.
constexpr Op kV1Ops[] = {Op::kSet,       Op::kCompareSet, Op::kGet,        Op::kAdd,
                         Op::kCheck,     Op::kWait,       Op::kGetNumKeys, Op::kWatchKey,
                         Op::kDeleteKey, Op::kAppend,     Op::kMultiGet,   Op::kMultiSet,
                         Op::kCancelWait};
constexpr Op kV2Ops[] = {Op::kValidate,   Op::kSet,      Op::kCompareSet, Op::kGet,
                         Op::kAdd,        Op::kCheck,    Op::kWait,       Op::kGetNumKeys,
                         Op::kDeleteKey,  Op::kAppend,   Op::kMultiGet,   Op::kMultiSet,
                         Op::kCancelWait, Op::kPing,     Op::kQueuePush,  Op::kQueuePop,
                         Op::kQueueLen,   Op::kListKeys, Op::kBarrier};

bool DecodeOp(Generation g, uint8_t byte, Op& op) {
  if (g == Generation::kV1 && byte < std::size(kV1Ops)) {
    op = kV1Ops[byte];
    return true;
  }
  if (g == Generation::kV2 && byte < std::size(kV2Ops)) {
    op = kV2Ops[byte];
    return true;
  }
  return false;
}

// DecodeOp's inverse.
bool EncodeOp(Generation g, Op op, uint8_t& byte) {
  auto find = [&](const auto& table) {
    for (size_t i = 0; i < std::size(table); ++i) {
      if (table[i] == op) {
        byte = static_cast<uint8_t>(i);
        return true;
      }
    }
    return false;
  };
  if (g == Generation::kV1) return find(kV1Ops);
  if (g == Generation::kV2) return find(kV2Ops);
  return false;
}

}  // namespace

const char* OpName(Op op) {
  static constexpr const char* kNames[] = {"VALIDATE",  "SET",         "COMPARE_SET", "GET",
                                           "ADD",       "CHECK",       "WAIT",        "GETNUMKEYS",
                                           "WATCH_KEY", "DELETE_KEY",  "APPEND",      "MULTI_GET",
                                           "MULTI_SET", "CANCEL_WAIT", "PING",        "QUEUE_PUSH",
                                           "QUEUE_POP", "QUEUE_LEN",   "LIST_KEYS",   "BARRIER"};
  return kNames[static_cast<int>(op)];
}

bool RequestParser::Append(const char* data, size_t n) {
  if (held() + n > limits_.max_buffered_bytes) {
    error_ = fmt::format("more than {} bytes buffered", limits_.max_buffered_bytes);
    return false;
  }
  // Drop what is parsed before growing: whole messages before pos_, and the
  // fields of the message in progress, which already live in cur_. The
  // buffer then holds one partial field at most plus what just arrived, and
  // every byte is moved at most once.
  size_t consumed = pos_ + (in_message_ ? cur_off_ : 0);
  if (consumed > 0) {
    buf_.erase(0, consumed);
    pos_ = 0;
    cur_off_ = 0;
  }
  buf_.append(data, n);
  return true;
}

RequestParser::Result RequestParser::Fail(std::string msg) {
  error_ = std::move(msg);
  return Result::kError;
}

bool RequestParser::ReadU32(size_t& at, uint32_t& v) {
  if (buf_.size() - at < 4) return false;
  std::memcpy(&v, buf_.data() + at, 4);
  at += 4;
  return true;
}

bool RequestParser::ReadU64(size_t& at, uint64_t& v) {
  if (buf_.size() - at < 8) return false;
  std::memcpy(&v, buf_.data() + at, 8);
  at += 8;
  return true;
}

bool RequestParser::ReadBytes(size_t& at, size_t max, const char* what, std::string& out) {
  size_t start = at;
  uint64_t len;
  if (!ReadU64(at, len)) return false;
  if (len > max) {
    error_ = fmt::format("{} of {} bytes is over the limit of {}", what, len, max);
    return false;
  }
  if (buf_.size() - at < len) {
    at = start;
    return false;
  }
  out.assign(buf_, at, len);
  at += len;
  return true;
}

namespace {

enum class Field { kWord, kNumber, kCount, kKey, kValue };

// The i-th field of a request (after the opcode). Requests with a count
// are the count followed by keys, or by key/value pairs for MULTI_SET.
Field FieldOf(Op op, uint64_t i) {
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
      return Field::kWord;
    case Op::kAdd:
    case Op::kBarrier:
      return i == 0 ? Field::kKey : Field::kNumber;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return i == 0 ? Field::kCount : Field::kKey;
    case Op::kMultiSet:
      return i == 0 ? Field::kCount : (i % 2 == 1 ? Field::kKey : Field::kValue);
    default:
      return i == 0 ? Field::kKey : Field::kValue;
  }
}

// Fields of a request before its count (if any) is known.
uint64_t FixedFields(Op op) {
  switch (op) {
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return 0;
    case Op::kValidate:
    case Op::kPing:
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kMultiSet:
      return 1;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
    case Op::kAdd:
    case Op::kBarrier:
      return 2;
    case Op::kCompareSet:
      return 3;
  }
  return 0;
}

}  // namespace

RequestParser::Result RequestParser::Next(Request* out) {
  if (!in_message_) {
    if (buf_.size() - pos_ < 1) return Result::kNeedMore;
    if (generation_ == Generation::kUnknown) {
      if (buf_[pos_] != 0) {
        generation_ = Generation::kV1;
      } else {
        if (buf_.size() - pos_ < 5) return Result::kNeedMore;
        uint32_t magic;
        std::memcpy(&magic, buf_.data() + pos_ + 1, 4);
        generation_ = magic == kValidationMagic ? Generation::kV2 : Generation::kV1;
      }
    }
    uint8_t byte = static_cast<uint8_t>(buf_[pos_]);
    cur_ = Request{};
    if (!DecodeOp(generation_, byte, cur_.op)) {
      return Fail(
          fmt::format("unknown {} opcode {}", generation_ == Generation::kV1 ? "v1" : "v2", byte));
    }
    in_message_ = true;
    cur_off_ = 1;
    cur_arg_bytes_ = 0;
    fields_done_ = 0;
    fields_total_ = FixedFields(cur_.op);
  }
  while (fields_done_ < fields_total_) {
    size_t at = pos_ + cur_off_;
    bool ok = false;
    switch (FieldOf(cur_.op, fields_done_)) {
      case Field::kWord:
        ok = ReadU32(at, cur_.word);
        break;
      case Field::kNumber: {
        uint64_t v = 0;
        ok = ReadU64(at, v);
        cur_.number = static_cast<int64_t>(v);
        break;
      }
      case Field::kCount: {
        uint64_t n = 0;
        ok = ReadU64(at, n);
        // MULTI_SET's count is an i64 on the wire; a negative one reads huge.
        if (ok && n > limits_.max_keys_per_request) {
          return Fail(fmt::format("{} of {} keys is over the limit of {}", OpName(cur_.op),
                                  static_cast<int64_t>(n), limits_.max_keys_per_request));
        }
        if (ok) fields_total_ = 1 + n * (cur_.op == Op::kMultiSet ? 2 : 1);
        break;
      }
      case Field::kKey:
      case Field::kValue: {
        bool key = FieldOf(cur_.op, fields_done_) == Field::kKey;
        std::string s;
        ok = ReadBytes(at, key ? limits_.max_key_bytes : limits_.max_value_bytes,
                       key ? "key" : "value", s);
        if (ok) {
          cur_arg_bytes_ += s.size();
          cur_.args.push_back(std::move(s));
        }
        break;
      }
    }
    if (!error_.empty()) return Result::kError;
    if (!ok) return Result::kNeedMore;
    cur_off_ = at - pos_;
    ++fields_done_;
  }
  pos_ += cur_off_;
  cur_off_ = 0;
  cur_arg_bytes_ = 0;
  in_message_ = false;
  // Every byte parsed: the buffer goes. Most connections are idle most of
  // the time, and an idle one then holds no buffer; a busy one allocates
  // one per read, which costs far less than the read.
  if (pos_ == buf_.size()) {
    pos_ = 0;
    std::string().swap(buf_);
  }
  *out = std::move(cur_);
  return Result::kRequest;
}

bool EncodeRequest(Generation g, const Request& r, std::string& o) {
  uint8_t byte = 0;
  if (!EncodeOp(g, r.op, byte)) return false;
  PutU8(o, byte);
  size_t arg = 0;
  uint64_t total = FixedFields(r.op);
  for (uint64_t i = 0; i < total; ++i) {
    switch (FieldOf(r.op, i)) {
      case Field::kWord:
        PutU32(o, r.word);
        break;
      case Field::kNumber:
        PutI64(o, r.number);
        break;
      case Field::kCount:
        PutI64(o, static_cast<int64_t>(r.op == Op::kMultiSet ? r.args.size() / 2 : r.args.size()));
        total = 1 + r.args.size();
        break;
      case Field::kKey:
      case Field::kValue:
        PutBytes(o, r.args[arg++]);
        break;
    }
  }
  return true;
}

}  // namespace trun::store
