#include "store/handlers.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "store/admission.h"
#include "store/encode.h"
#include "store/wire_format.h"

namespace trun::store {
namespace {

using Handler = Outcome (*)(Keyspace&, Request&, const RequestContext&);

Outcome Replied(std::string bytes) { return {Outcome::kReply, std::move(bytes)}; }
Outcome NoReply() { return {}; }
Outcome Dropped(std::string why) { return {Outcome::kDrop, std::move(why)}; }

Outcome ReplyU8(uint8_t v) {
  std::string o;
  PutU8(o, v);
  return Replied(std::move(o));
}

Outcome ReplyI64(int64_t v) {
  std::string o;
  PutI64(o, v);
  return Replied(std::move(o));
}

Outcome ReplyBytes(std::string_view b) {
  std::string o;
  PutBytes(o, b);
  return Replied(std::move(o));
}

std::string_view ValueOf(const std::string* v) {
  return v == nullptr ? std::string_view() : std::string_view(*v);
}

Outcome OnValidate(Keyspace&, Request& r, const RequestContext&) {
  return r.word == kValidationMagic ? NoReply() : Dropped("bad VALIDATE magic");
}

Outcome OnPing(Keyspace&, Request& r, const RequestContext&) {
  std::string o;
  PutU32(o, r.word);
  return Replied(std::move(o));
}

Outcome OnSet(Keyspace& keys, Request& r, const RequestContext&) {
  keys.Set(r.args[0], std::move(r.args[1]));
  return NoReply();
}

Outcome OnCompareSet(Keyspace& keys, Request& r, const RequestContext&) {
  return ReplyBytes(keys.CompareSet(r.args[0], r.args[1], std::move(r.args[2])));
}

Outcome OnGet(Keyspace& keys, Request& r, const RequestContext&) {
  return ReplyBytes(ValueOf(keys.Find(r.args[0])));
}

Outcome OnAdd(Keyspace& keys, Request& r, const RequestContext&) {
  auto v = keys.Add(r.args[0], r.number);
  return v.ok() ? ReplyI64(*v) : Dropped(v.status().message());
}

Outcome OnCheck(Keyspace& keys, Request& r, const RequestContext&) {
  return ReplyU8(keys.AllExist(r.args) ? kCheckReady : kCheckNotReady);
}

Outcome OnWait(Keyspace& keys, Request& r, const RequestContext& ctx) {
  // Not all there yet: answered by the keyspace's WaitDone.
  return keys.Wait(ctx.conn, r.args) ? ReplyU8(kWaitStopWaiting) : NoReply();
}

Outcome OnGetNumKeys(Keyspace& keys, Request&, const RequestContext& ctx) {
  size_t n = ctx.untrun ? keys.CountKeys(IsTrunKey) : keys.num_keys();
  return ReplyI64(static_cast<int64_t>(n));
}

Outcome OnWatchKey(Keyspace& keys, Request& r, const RequestContext& ctx) {
  keys.Watch(ctx.conn, r.args[0]);
  return ReplyU8(kWatchCallbackRegistered);
}

Outcome OnDeleteKey(Keyspace& keys, Request& r, const RequestContext&) {
  return ReplyI64(keys.Delete(r.args[0]) ? 1 : 0);
}

Outcome OnAppend(Keyspace& keys, Request& r, const RequestContext&) {
  Status st = keys.Append(r.args[0], r.args[1]);
  return st.ok() ? NoReply() : Dropped(st.message());
}

// Replies whose size a client chooses (MULTI_GET of one large value many
// times, LIST_KEYS of a large store) are measured before they are built,
// so that one over the connection's reply limit is never allocated whole.
Outcome OnMultiGet(Keyspace& keys, Request& r, const RequestContext& ctx) {
  size_t size = 0;
  for (const auto& k : r.args) size += 8 + ValueOf(keys.Find(k)).size();
  if (size > ctx.reply_room) {
    return Dropped(fmt::format("MULTI_GET reply of {} bytes is over the reply limit", size));
  }
  std::string o;
  o.reserve(size);
  for (const auto& k : r.args) PutBytes(o, ValueOf(keys.Find(k)));
  return Replied(std::move(o));
}

Outcome OnMultiSet(Keyspace& keys, Request& r, const RequestContext&) {
  auto& a = r.args;
  for (size_t i = 0; i + 1 < a.size(); i += 2) keys.Set(a[i], std::move(a[i + 1]));
  return NoReply();
}

Outcome OnCancelWait(Keyspace& keys, Request&, const RequestContext& ctx) {
  keys.CancelWaits(ctx.conn);
  return ReplyU8(kWaitCanceled);
}

Outcome OnQueuePush(Keyspace& keys, Request& r, const RequestContext&) {
  keys.Push(r.args[0], std::move(r.args[1]));
  return NoReply();
}

// i64 items in the queue before the pop; then the item, if any.
Outcome OnQueuePop(Keyspace& keys, Request& r, const RequestContext&) {
  std::string item;
  int64_t n = keys.Pop(r.args[0], &item);
  std::string o;
  PutI64(o, n);
  if (n > 0) PutBytes(o, item);
  return Replied(std::move(o));
}

Outcome OnQueueLen(Keyspace& keys, Request& r, const RequestContext&) {
  return ReplyI64(keys.QueueLength(r.args[0]));
}

// i64 count, then every key as bytes, in no particular order (torch's
// servers walk their hash map too); `init/` included, queues not. torch's
// client keeps the keys that start with its prefix "/". A client without
// the job token, where the store asks for one, is not shown trun's keys
// (admission.h).
Outcome OnListKeys(Keyspace& keys, Request&, const RequestContext& ctx) {
  auto hidden = [&ctx](const std::string& key) { return ctx.untrun && IsTrunKey(key); };
  size_t size = 8, n = 0;
  keys.ForEachKey([&](const std::string& key) {
    if (hidden(key)) return;
    size += 8 + key.size();
    ++n;
  });
  if (size > ctx.reply_room) {
    return Dropped(fmt::format("LIST_KEYS reply of {} bytes is over the reply limit", size));
  }
  std::string o;
  o.reserve(size);
  PutI64(o, static_cast<int64_t>(n));
  keys.ForEachKey([&](const std::string& key) {
    if (!hidden(key)) PutBytes(o, key);
  });
  return Replied(std::move(o));
}

Outcome OnBarrier(Keyspace& keys, Request& r, const RequestContext& ctx) {
  auto now = keys.Barrier(ctx.conn, r.args[0], r.number);
  if (!now.ok()) return Dropped(now.status().message());
  return *now ? ReplyU8(kWaitStopWaiting) : NoReply();
}

// The handler of each Op.
constexpr std::array<Handler, kNumOps> kHandlers = [] {
  std::array<Handler, kNumOps> t{};
  auto on = [&t](Op op, Handler h) { t[static_cast<size_t>(op)] = h; };
  on(Op::kValidate, OnValidate);
  on(Op::kPing, OnPing);
  on(Op::kSet, OnSet);
  on(Op::kCompareSet, OnCompareSet);
  on(Op::kGet, OnGet);
  on(Op::kAdd, OnAdd);
  on(Op::kCheck, OnCheck);
  on(Op::kWait, OnWait);
  on(Op::kGetNumKeys, OnGetNumKeys);
  on(Op::kWatchKey, OnWatchKey);
  on(Op::kDeleteKey, OnDeleteKey);
  on(Op::kAppend, OnAppend);
  on(Op::kMultiGet, OnMultiGet);
  on(Op::kMultiSet, OnMultiSet);
  on(Op::kCancelWait, OnCancelWait);
  on(Op::kQueuePush, OnQueuePush);
  on(Op::kQueuePop, OnQueuePop);
  on(Op::kQueueLen, OnQueueLen);
  on(Op::kListKeys, OnListKeys);
  on(Op::kBarrier, OnBarrier);
  return t;
}();
static_assert(std::find(kHandlers.begin(), kHandlers.end(), nullptr) == kHandlers.end(),
              "every Op has a handler");

}  // namespace

Outcome HandleRequest(Keyspace& keys, Request& r, const RequestContext& ctx) {
  return kHandlers[static_cast<size_t>(r.op)](keys, r, ctx);
}

}  // namespace trun::store
