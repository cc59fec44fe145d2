#include "store/link_host.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "store/encode.h"

namespace trun::store {

namespace {
// ProcessLinkCounts' counters.
std::atomic<uint64_t> g_links_opened{0}, g_links_closed{0};

void SendFrame(Connection& c, FrameKind kind, uint32_t stream, std::string_view payload) {
  std::string o;
  PutFrames(o, kind, stream, payload);
  c.Send(o);
}
}  // namespace

void LinkHost::Open(const ConnectionPtr& c, const Request& r) {
  if (!r.args[1].empty() || r.args[2] != kLinkVersion) {
    return server_.Drop(c, fmt::format("asked for a link of version \"{}\"; this store speaks {}",
                                       r.args[2], kLinkVersion));
  }
  std::string o;
  PutBytes(o, kLinkVersion);
  c->Send(o);
  if (c->closed) return;  // the answer's write failed: dropped
  c->link = true;
  links_[c->id].conn = c.get();
  g_links_opened.fetch_add(1, std::memory_order_relaxed);
}

bool LinkHost::Bytes(const ConnectionPtr& c, const char* data, size_t n) {
  auto it = links_.find(c->id);
  if (it == links_.end()) return false;
  Link& link = it->second;
  link.frames.Append(data, n);
  Frame f;
  while (true) {
    auto got = link.frames.Next(&f);
    if (got == FrameDecoder::Result::kNeedMore) return true;
    if (got == FrameDecoder::Result::kError) {
      server_.Drop(c, link.frames.error());
      return false;
    }
    OnFrame(c, link, f);
    if (c->closed) return false;
  }
}

void LinkHost::Forget(uint64_t conn) {
  auto link = links_.find(conn);
  if (link == links_.end()) return;
  for (const auto& [id, stream] : link->second.streams) {
    keys_.Forget(stream->owner);
    stream_owners_.erase(stream->owner);
  }
  links_.erase(link);
  g_links_closed.fetch_add(1, std::memory_order_relaxed);
}

void LinkHost::Clear() {
  g_links_closed.fetch_add(links_.size(), std::memory_order_relaxed);
  links_.clear();
  stream_owners_.clear();
}

void LinkHost::WaitDone(uint64_t owner, bool by_push, std::string_view reply) {
  auto [link, stream] = StreamOf(owner);
  if (stream == nullptr) return;
  if (stream->shared && by_push) {
    // The push's item serves one of the relay's waiters; the others keep
    // waiting on this stream, for the key's next change or push.
    keys_.WaitForNext(owner, stream->wait_key);
    return SendFrame(*link, FrameKind::kWokeOne, stream->id, "");
  }
  SendFrame(*link, FrameKind::kData, stream->id, reply);
}

void LinkHost::SendTo(uint64_t owner, std::string_view bytes) {
  if (auto [link, stream] = StreamOf(owner); stream != nullptr) {
    SendFrame(*link, FrameKind::kData, stream->id, bytes);
  }
}

size_t LinkHost::HeldBy(const Connection& c) const {
  auto link = links_.find(c.id);
  if (link == links_.end()) return c.UnfinishedBytes();
  return link->second.held + link->second.frames.buffered();
}

void LinkHost::OnFrame(const ConnectionPtr& c, Link& link, Frame& f) {
  auto it = link.streams.find(f.stream);
  switch (f.kind) {
    case FrameKind::kClose:
      if (it != link.streams.end()) ForgetStream(link, it);
      return;
    case FrameKind::kWokeOne:
      return server_.Drop(c, "a relay sent WOKE_ONE, which only the store sends");
    case FrameKind::kOpenShared:
      if (it != link.streams.end()) {
        return server_.Drop(
            c, fmt::format("stream {} opened as shared after its first bytes", f.stream));
      }
      OpenStream(c, link, f.stream, true);
      return;
    case FrameKind::kData:
      break;
  }
  Stream* s = it != link.streams.end() ? it->second.get() : OpenStream(c, link, f.stream, false);
  if (s == nullptr) return;
  // link.held is the sum of its streams' held() at every step, so that
  // closing a stream anywhere takes back exactly what it held.
  size_t before = s->parser.held();
  if (!s->parser.Append(f.payload.data(), f.payload.size())) {
    return CloseStream(c, link, *s, s->parser.error());
  }
  link.held += s->parser.held() - before;
  Request r;
  while (true) {
    size_t held = s->parser.held();
    auto got = s->parser.Next(&r);
    link.held -= held - s->parser.held();
    if (got == RequestParser::Result::kNeedMore) return;
    if (got == RequestParser::Result::kError) return CloseStream(c, link, *s, s->parser.error());
    // False: the stream, or the whole link, is gone.
    if (!HandleStreamRequest(c, link, *s, r) || c->closed) return;
  }
}

// nullptr (and the link dropped) past kMaxLinkStreams.
LinkHost::Stream* LinkHost::OpenStream(const ConnectionPtr& c, Link& link, uint32_t id,
                                       bool shared) {
  if (link.streams.size() >= kMaxLinkStreams) {
    server_.Drop(c, fmt::format("more than {} streams open on one link", kMaxLinkStreams));
    return nullptr;
  }
  auto s = std::make_unique<Stream>(limits_);
  s->owner = server_.NewOwner();
  s->id = id;
  s->shared = shared;
  stream_owners_[s->owner] = {c->id, id};
  return link.streams.emplace(id, std::move(s)).first->second.get();
}

void LinkHost::ForgetStream(Link& link, Streams::iterator it) {
  Stream& s = *it->second;
  link.held -= std::min(link.held, s.parser.held());
  keys_.Forget(s.owner);
  stream_owners_.erase(s.owner);
  link.streams.erase(it);
}

// A stream that broke the protocol, a limit or the admission rule is
// closed as its connection would be; the link and its other streams go
// on.
void LinkHost::CloseStream(const ConnectionPtr& c, Link& link, Stream& s, const std::string& why) {
  server_.StreamDropped(c->peer(), why,
                        fmt::format("store: closed stream {} of the relay at {}: {}", s.id,
                                    c->peer().to_string(), why));
  uint32_t id = s.id;
  SendFrame(*c, FrameKind::kClose, id, "");
  if (!c->closed) ForgetStream(link, link.streams.find(id));
}

// A stream's request, judged as a connection without the job token is
// (a relay's clients are torch's workers, which never prove it). False
// when the stream, or its link, was closed.
bool LinkHost::HandleStreamRequest(const ConnectionPtr& c, Link& link, Stream& s, Request& r) {
  Admission a = server_.AdmitStreamRequest(r);
  if (a.verdict != Verdict::kServe && a.verdict != Verdict::kServeUntrun) {
    CloseStream(
        c, link, s,
        fmt::format("{} names trun's keys, which a relay's client may not use", OpName(r.op)));
    return false;
  }
  if (s.shared && r.op != Op::kValidate && (r.op != Op::kWait || r.args.size() != 1)) {
    CloseStream(c, link, s,
                fmt::format("{} on a shared stream, which carries WAITs of one key", OpName(r.op)));
    return false;
  }
  if (s.shared && r.op == Op::kWait) s.wait_key = r.args[0];
  uint32_t id = s.id;
  Outcome out = server_.HandleFor(c, s.owner, r, a.verdict == Verdict::kServeUntrun);
  // The request may have woken another stream of this link, whose reply
  // could overflow it: the link, and so `s`, may be gone.
  if (c->closed) return false;
  if (out.kind == Outcome::kReply) SendFrame(*c, FrameKind::kData, id, out.bytes);
  if (out.kind == Outcome::kDrop) {
    CloseStream(c, link, s, out.bytes);
    return false;
  }
  return !c->closed;
}

// The link and the stream that keyspace owner `owner` is, if it is one.
std::pair<Connection*, LinkHost::Stream*> LinkHost::StreamOf(uint64_t owner) {
  auto ref = stream_owners_.find(owner);
  if (ref == stream_owners_.end()) return {nullptr, nullptr};
  auto link = links_.find(ref->second.first);
  if (link == links_.end()) return {nullptr, nullptr};
  auto stream = link->second.streams.find(ref->second.second);
  if (stream == link->second.streams.end()) return {nullptr, nullptr};
  return {link->second.conn, stream->second.get()};
}

LinkCounts ProcessLinkCounts() {
  return {g_links_opened.load(std::memory_order_relaxed),
          g_links_closed.load(std::memory_order_relaxed)};
}

}  // namespace trun::store
