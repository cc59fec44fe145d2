#include "store/link.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "store/encode.h"

namespace trun::store {

void PutFrames(std::string& o, FrameKind kind, uint32_t stream, std::string_view payload) {
  do {
    size_t n = std::min(payload.size(), kMaxFramePayload);
    PutU8(o, static_cast<uint8_t>(kind));
    PutU32(o, stream);
    PutU32(o, static_cast<uint32_t>(n));
    o.append(payload.substr(0, n));
    payload.remove_prefix(n);
  } while (!payload.empty());
}

void FrameDecoder::Append(const char* data, size_t n) {
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

FrameDecoder::Result FrameDecoder::Next(Frame* out) {
  if (!error_.empty()) return Result::kError;
  if (buffered() < kFrameHeaderBytes) return Result::kNeedMore;
  const char* p = buf_.data() + pos_;
  uint8_t kind = static_cast<uint8_t>(p[0]);
  uint32_t stream = 0, len = 0;
  std::memcpy(&stream, p + 1, 4);
  std::memcpy(&len, p + 5, 4);
  if (kind > static_cast<uint8_t>(FrameKind::kWokeOne)) {
    error_ = fmt::format("link frame of unknown kind {}", kind);
    return Result::kError;
  }
  if (len > kMaxFramePayload) {
    error_ = fmt::format("link frame of {} bytes is over the limit of {}", len, kMaxFramePayload);
    return Result::kError;
  }
  if (static_cast<FrameKind>(kind) != FrameKind::kData && len != 0) {
    error_ = fmt::format("link frame of kind {} with a payload", kind);
    return Result::kError;
  }
  if (buffered() < kFrameHeaderBytes + len) return Result::kNeedMore;
  out->kind = static_cast<FrameKind>(kind);
  out->stream = stream;
  out->payload.assign(p + kFrameHeaderBytes, len);
  pos_ += kFrameHeaderBytes + len;
  if (pos_ == buf_.size()) {
    pos_ = 0;
    std::string().swap(buf_);
  }
  return Result::kFrame;
}

}  // namespace trun::store
