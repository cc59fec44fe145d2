#include "store/relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "common/acceptor.h"
#include "common/log.h"
#include "store/admission.h"
#include "store/auth.h"
#include "store/client.h"
#include "store/connection.h"
#include "store/encode.h"
#include "store/link.h"
#include "store/pressure.h"
#include "store/pressure_guard.h"
#include "store/process_limits.h"

namespace trun::store {

using asio::ip::tcp;

std::vector<int64_t> SplitAddResult(int64_t upstream_value, const std::vector<int64_t>& deltas) {
  // Unsigned arithmetic wraps as the store's sums do.
  uint64_t sum = 0;
  for (int64_t d : deltas) sum += static_cast<uint64_t>(d);
  uint64_t at = static_cast<uint64_t>(upstream_value) - sum;
  std::vector<int64_t> out;
  out.reserve(deltas.size());
  for (int64_t d : deltas) {
    at += static_cast<uint64_t>(d);
    out.push_back(static_cast<int64_t>(at));
  }
  return out;
}

namespace {

// A link carries at most kMaxLinkStreams streams, and the store drops a
// link that opens more, with every client of its node: one stream per
// client that sent what only the store answers, one per key waited on, and
// the shared one. So the relay serves at most half that many clients at
// once and shares waits on at most half that many keys, less the shared
// stream's one; a node's ranks are a few, and a local process that opens
// thousands of connections is refused, not the link; a WAIT past the keys
// goes up on its client's own stream.
constexpr size_t kMaxClients = kMaxLinkStreams / 2;
constexpr size_t kMaxKeyWaits = kMaxLinkStreams / 2 - 1;

std::string OneByte(uint8_t v) {
  std::string o;
  PutU8(o, v);
  return o;
}

// A v2 stream starts with VALIDATE, as torch 2.x's client does.
std::string V2Hello() {
  std::string o;
  PutU8(o, v2::kValidate);
  PutU32(o, kValidationMagic);
  return o;
}

}  // namespace

class Relay::Impl : public std::enable_shared_from_this<Relay::Impl>, public ConnectionHost {
 public:
  Impl(asio::io_context& io, RelayOptions options, tcp::socket link)
      : io_(io),
        options_(std::move(options)),
        link_(std::move(link)),
        pressure_(io, "the relay", options_.max_partial_bytes, options_.max_queued_reply_bytes,
                  [this](uint64_t id, const std::string& why) {
                    if (Client* c = ClientOf(id)) Drop(c->conn, why);
                  }) {}

  Status Listen() {
    Acceptor::Callbacks cb;
    cb.open = [this] { return clients_.size(); };
    // At the cap the oldest client that has sent nothing yet gives way, as
    // at the store's: a flood of idle connections cannot keep a node's
    // ranks out; where every client has spoken, the newcomer is refused.
    cb.make_room = [this] {
      Connection* oldest = silent_.front();
      if (oldest == nullptr) return false;
      Drop(ConnectionPtr(oldest), CapReason() + ": the oldest that sent nothing gives way");
      return true;
    };
    cb.refuse = [this](Acceptor::Socket&, const asio::ip::address& peer) {
      Refused(peer.to_string(), CapReason(), "refused a client");
    };
    cb.serve = [this](Acceptor::Socket s, const asio::ip::address& peer) {
      Serve(std::move(s), peer);
    };
    auto acceptor = Acceptor::Listen(
        io_, {options_.host, options_.port, "store relay", kMaxClients}, std::move(cb));
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = std::move(*acceptor);
    ReadLink();
    return Status::OK();
  }

  void Close() {
    if (acceptor_) acceptor_->Close();
    linked_ = false;
    std::error_code ec;
    link_.close(ec);
    for (auto& [id, c] : clients_) c.conn->Close();
    clients_.clear();
    silent_ = ConnectionList();
    pressure_.Stop();
  }

  int port() const { return acceptor_->port(); }
  size_t num_clients() const { return clients_.size(); }
  bool linked() const { return linked_; }
  RelayStats stats() const { return stats_; }

  // ---- ConnectionHost: the relay's clients -----------------------------------

  void Handle(const ConnectionPtr& c, Request& r) override {
    auto it = clients_.find(c->id);
    if (it == clients_.end()) return;
    Client& client = it->second;
    Standing standing;
    standing.token_asked = !options_.job_token.empty();
    Verdict v = Admit(r, standing).verdict;
    if (v != Verdict::kServe && v != Verdict::kServeUntrun) {
      return Drop(c, fmt::format("{} names trun's keys (/trun/), which a relay's client may not "
                                 "use: they need the job token, which only agents prove",
                                 OpName(r.op)));
    }
    switch (r.op) {
      case Op::kValidate:
        if (r.word != kValidationMagic) Drop(c, "bad VALIDATE magic");
        return;
      case Op::kPing: {
        if (!Settled(client)) return Forward(client, r);
        std::string o;
        PutU32(o, r.word);
        return c->Send(o);
      }
      case Op::kAdd:
        ++stats_.local_adds;
        return Add(client, r.args[0], r.number);
      case Op::kGet:
        ++stats_.local_gets;
        return Get(client, r.args[0]);
      case Op::kWait:
        ++stats_.local_waits;
        return Wait(client, r);
      case Op::kCancelWait:
        return CancelWait(client, r);
      default:
        return Forward(client, r);
    }
  }

  // What requests not yet whole and replies left unread hold is bounded as
  // at the store (pressure_guard.h).
  bool AfterRead(const ConnectionPtr& c, size_t arrived) override {
    pressure_.AfterRead(c->id, arrived, c->UnfinishedBytes());
    return !c->closed;
  }

  void RepliesQueued(Connection& c, size_t queued, bool drained) override {
    pressure_.RepliesQueued(c.id, queued, drained);
  }

  void Drop(const ConnectionPtr& c, const std::string& why) override {
    if (c->closed) return;
    // Limited as the store's refusals are: a client that breaks the
    // protocol in a loop costs a line a minute.
    if (!why.empty()) Refused(c->peer().to_string(), why, "dropped client");
    silent_.Erase(*c);
    pressure_.Remove(c->id);
    c->Close();
    auto it = clients_.find(c->id);
    if (it == clients_.end()) return;
    for (auto& w : it->second.waits) w->done = true;
    if (it->second.stream != 0) {
      SendUp(FrameKind::kClose, it->second.stream, "");
      streams_.erase(it->second.stream);
    }
    clients_.erase(it);
  }

  void Spoke(Connection& c) override { silent_.Erase(c); }
  const Limits& limits() const override { return options_.limits; }
  size_t max_pending_reply_bytes() const override { return kDefaultMaxBufferedBytes; }
  std::array<char, 64 * 1024>& read_buf() override { return read_buf_; }
  bool LinkBytes(const ConnectionPtr&, const char*, size_t) override { return false; }

 private:
  // A local WAIT: released when each of its keys' upstream WAITs is
  // answered (a key named twice counts twice, as in the store).
  struct LocalWait {
    uint64_t client = 0;
    std::vector<std::string> keys;
    size_t missing = 0;
    bool done = false;
  };
  struct AddQueue {
    bool in_flight = false;
    bool due = false;  // in adds_due_
    std::vector<std::pair<uint64_t, int64_t>> queued;
  };
  using AddQueues = std::unordered_map<std::string, AddQueue>;
  struct Client {
    ConnectionPtr conn;
    uint32_t stream = 0;  // its own stream on the link; 0 until it needs one
    // A WAIT or BARRIER went up on its own stream (ever): its CANCEL_WAITs
    // go up too, since only the store can cancel those.
    bool upstream_wait = false;
    std::vector<std::shared_ptr<LocalWait>> waits;
    // Where its requests stand (the order rule, relay.h): the link's
    // sequence number of its latest request that went up, or of the one
    // it rode on, and its ADD that waits in a key's batch, if one does
    // (at most one: any later request of the client sends it up first).
    uint64_t up_seq = 0;
    AddQueues::value_type* held_add = nullptr;
  };
  // The upstream WAIT of one key, on a shared stream of its own.
  struct KeyWait {
    uint32_t stream = 0;
    std::deque<std::shared_ptr<LocalWait>> waiters;
    uint64_t seq = 0;  // its WAIT's sequence number on the link
  };
  // Requests on the shared stream that carries ADDs and GETs, answered in
  // order.
  struct GetBatch {
    uint64_t epoch = 0;
    uint64_t seq = 0;
    std::vector<uint64_t> clients;
  };
  struct Pending {
    enum class Kind : uint8_t { kAdd, kGet, kCancel };
    Kind kind = Kind::kAdd;
    uint64_t seq = 0;  // its frame's sequence number on the link
    std::string key;
    std::vector<std::pair<uint64_t, int64_t>> adds;  // (client, delta)
    std::shared_ptr<GetBatch> get;
    // A CANCEL_WAIT sent for `canceller`: when its answer comes, these of
    // its local WAITs that were not released meanwhile are cancelled, and
    // WAIT_CANCELED is its answer where `answer_cancel`.
    uint64_t canceller = 0;
    bool answer_cancel = false;
    std::vector<std::shared_ptr<LocalWait>> cancels;
  };
  // What a stream of the link is for.
  struct StreamUse {
    uint64_t client = 0;      // a client's own stream
    std::string wait_key;     // a shared WAIT's
    bool shared_ops = false;  // the ADDs' and GETs'
  };

  static std::string CapReason() {
    return fmt::format("the relay serves at most {} clients at once (this node's ranks are a few)",
                       kMaxClients);
  }

  void Serve(Acceptor::Socket s, const asio::ip::address& peer) {
    if (!linked_) {
      std::error_code ec;
      s.close(ec);
      return;
    }
    std::error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);
    ConnectionPtr c = Connection::Make(*this, std::move(s), ++last_client_, peer);
    clients_[c->id].conn = c;
    silent_.PushBack(*c);
    ++stats_.clients;
    c->Start();
  }

  void Refused(const std::string& source, const std::string& why, std::string_view what) {
    if (auto l = refusals_.Line(
            source, why, fmt::format("store relay: {} {}: {}", what, source, why), Clock::now())) {
      log::Warning("{}", *l);
    }
  }

  Client* ClientOf(uint64_t id) {
    auto it = clients_.find(id);
    return it == clients_.end() ? nullptr : &it->second;
  }

  uint32_t NewStream(StreamUse use) {
    uint32_t id = NextStreamId(next_stream_, [this](uint32_t s) { return streams_.contains(s); });
    streams_.emplace(id, std::move(use));
    return id;
  }

  // ---- what is shared -------------------------------------------------------

  // Whether the client's requests so far are all answered (or took effect
  // before something that was), and the store is known to hold the
  // upstream WAITs of its local WAITs unanswered (one that went up, or was
  // joined, after the latest answer came may have been answered at once,
  // the answer on its way down), so that an answer the relay gives itself
  // (PING, CANCEL_WAIT) comes after theirs, as the store would send it.
  bool Settled(const Client& client) const {
    return client.held_add == nullptr && client.up_seq <= confirmed_ &&
           std::all_of(client.waits.begin(), client.waits.end(),
                       [this](const auto& w) { return w->done || Registered(*w); });
  }

  // An ADD waits for the end of the loop's turn (or for the next frame to
  // go up, whichever comes first), so that the ADDs of one key that arrive
  // in one batch of readable clients go up as one, as do those that came
  // while one was on its way.
  void Add(Client& client, const std::string& key, int64_t delta) {
    Unhold(client);
    auto& entry = *adds_.try_emplace(key).first;
    entry.second.queued.emplace_back(client.conn->id, delta);
    client.held_add = &entry;
    MarkDue(entry.first, entry.second);
  }

  // The client's ADD that waits in its key's batch goes up now, before the
  // client's next request: with its batch where none of the key is on its
  // way, else alone on the client's own stream (the batch waits for the
  // answer of the one on its way, and the client's next request may not).
  void Unhold(Client& client) {
    if (client.held_add == nullptr) return;
    auto& [key, q] = *client.held_add;
    client.held_add = nullptr;
    if (!q.in_flight) {
      q.due = false;
      return SendAdds(key, q);
    }
    uint64_t id = client.conn->id;
    auto mine = std::find_if(q.queued.begin(), q.queued.end(),
                             [id](const auto& add) { return add.first == id; });
    Request r;
    r.op = Op::kAdd;
    r.args = {key};
    r.number = mine->second;
    q.queued.erase(mine);
    Forward(client, r);
  }

  void MarkDue(const std::string& key, AddQueue& q) {
    if (q.in_flight || q.due) return;
    q.due = true;
    adds_due_.push_back(key);
    ScheduleFlush();
  }

  // Sends the ADDs that wait, in the order their keys' first ADDs came.
  void SendDueAdds() {
    std::vector<std::string> due;
    due.swap(adds_due_);
    for (const auto& key : due) {
      auto it = adds_.find(key);
      if (it == adds_.end() || !it->second.due) continue;
      it->second.due = false;
      SendAdds(key, it->second);
    }
  }

  void SendAdds(const std::string& key, AddQueue& q) {
    Pending p;
    p.key = key;
    p.adds = std::move(q.queued);
    q.queued.clear();
    q.in_flight = true;
    int64_t sum = 0;
    for (const auto& [id, d] : p.adds) {
      sum = static_cast<int64_t>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(d));
    }
    Request r;
    r.op = Op::kAdd;
    r.args = {key};
    r.number = sum;
    SendShared(r);
    p.seq = sent_;
    for (const auto& [id, d] : p.adds) {
      if (Client* c = ClientOf(id)) {
        c->held_add = nullptr;
        c->up_seq = sent_;
      }
    }
    pending_.push_back(std::move(p));
    ++stats_.upstream_adds;
  }

  void Get(Client& client, const std::string& key) {
    Unhold(client);
    auto it = gets_.find(key);
    if (it != gets_.end() && it->second->epoch == epoch_) {
      it->second->clients.push_back(client.conn->id);
      client.up_seq = std::max(client.up_seq, it->second->seq);
      return;
    }
    Request r;
    r.op = Op::kGet;
    r.args = {key};
    SendShared(r);
    auto batch = std::make_shared<GetBatch>();
    batch->epoch = epoch_;
    batch->seq = sent_;
    batch->clients.push_back(client.conn->id);
    gets_[key] = batch;
    client.up_seq = sent_;
    Pending p;
    p.kind = Pending::Kind::kGet;
    p.seq = sent_;
    p.key = key;
    p.get = std::move(batch);
    pending_.push_back(std::move(p));
    ++stats_.upstream_gets;
  }

  void SendShared(const Request& r) {
    if (shared_stream_ == 0) {
      StreamUse use;
      use.shared_ops = true;
      shared_stream_ = NewStream(std::move(use));
      shared_in_.clear();
      std::string hello = V2Hello();
      EncodeRequest(Generation::kV2, r, hello);
      SendUp(FrameKind::kData, shared_stream_, hello);
      return;
    }
    std::string o;
    EncodeRequest(Generation::kV2, r, o);
    SendUp(FrameKind::kData, shared_stream_, o);
  }

  // Replies on the shared stream, in the order of pending_.
  void OnSharedReply(std::string_view bytes) {
    shared_in_.append(bytes);
    size_t at = 0;
    while (!pending_.empty()) {
      Pending& p = pending_.front();
      size_t left = shared_in_.size() - at;
      if (p.kind == Pending::Kind::kCancel) {
        if (left < 1) break;
        at += 1;
        confirmed_ = std::max(confirmed_, p.seq);
        AnswerCancel(p);
        pending_.pop_front();
        continue;
      }
      if (left < 8) break;
      int64_t v = 0;
      std::memcpy(&v, shared_in_.data() + at, 8);
      if (p.kind == Pending::Kind::kGet) {
        if (left - 8 < static_cast<uint64_t>(v)) break;
        std::string reply = shared_in_.substr(at, 8 + static_cast<size_t>(v));
        at += reply.size();
        confirmed_ = std::max(confirmed_, p.seq);
        AnswerGet(p, reply);
      } else {
        at += 8;
        confirmed_ = std::max(confirmed_, p.seq);
        AnswerAdds(p, v);
      }
      pending_.pop_front();
    }
    shared_in_.erase(0, at);
  }

  void AnswerGet(const Pending& p, const std::string& reply) {
    if (auto it = gets_.find(p.key); it != gets_.end() && it->second == p.get) gets_.erase(it);
    for (uint64_t id : p.get->clients) {
      if (Client* c = ClientOf(id)) c->conn->Send(reply);
    }
  }

  void AnswerAdds(const Pending& p, int64_t value) {
    std::vector<int64_t> deltas;
    for (const auto& [id, d] : p.adds) deltas.push_back(d);
    std::vector<int64_t> values = SplitAddResult(value, deltas);
    for (size_t i = 0; i < p.adds.size(); ++i) {
      Client* c = ClientOf(p.adds[i].first);
      if (c == nullptr) continue;
      std::string o;
      PutI64(o, values[i]);
      c->conn->Send(o);
    }
    auto it = adds_.find(p.key);
    if (it == adds_.end()) return;
    it->second.in_flight = false;
    if (it->second.queued.empty()) {
      adds_.erase(it);
    } else {
      MarkDue(p.key, it->second);
    }
  }

  // The store closed the shared stream (an ADD to a value that is no
  // integer, which closes a direct client too): every client whose request
  // was on it goes. The ADDs that waited in their keys' batches were not
  // refused: they go up on a new shared stream, which the next request
  // opens, as they would have reached the store after the refused one.
  void SharedStreamClosed() {
    std::vector<uint64_t> gone;
    for (const auto& p : pending_) {
      for (const auto& [id, d] : p.adds) gone.push_back(id);
      if (p.get) gone.insert(gone.end(), p.get->clients.begin(), p.get->clients.end());
      if (p.kind == Pending::Kind::kCancel) gone.push_back(p.canceller);
    }
    pending_.clear();
    gets_.clear();
    streams_.erase(shared_stream_);
    shared_stream_ = 0;
    for (auto it = adds_.begin(); it != adds_.end();) {
      it->second.in_flight = false;
      if (it->second.queued.empty()) {
        it = adds_.erase(it);
        continue;
      }
      MarkDue(it->first, it->second);
      ++it;
    }
    for (uint64_t id : gone) {
      if (Client* c = ClientOf(id)) {
        Drop(c->conn, "the store refused a request shared with it (see the store's log)");
      }
    }
  }

  // A WAIT joins the upstream WAIT of each of its keys, or opens one. An
  // upstream WAIT that went up before the client's latest request may have
  // been answered already (the answer on its way down) and the key deleted
  // since, before that request took effect: it stands for this WAIT only
  // where that request was answered, or something sent after it was. Else
  // the WAIT goes up on the client's own stream.
  void Wait(Client& client, Request& r) {
    Unhold(client);
    if (r.args.empty()) {
      if (!Settled(client)) return Forward(client, r);
      return client.conn->Send(OneByte(kWaitStopWaiting));
    }
    std::vector<std::string> distinct = r.args;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    if (client.up_seq > confirmed_) {
      for (const auto& key : distinct) {
        auto it = key_waits_.find(key);
        if (it != key_waits_.end() && it->second.seq < client.up_seq) return Forward(client, r);
      }
    }
    // Past the keys the relay may wait on at once (their waits linger until
    // the key is set, also after their clients went), the WAIT goes up on
    // the client's own stream, which it has anyway: unshared, never refused.
    const auto fresh = std::count_if(distinct.begin(), distinct.end(),
                                     [&](const std::string& k) { return !key_waits_.contains(k); });
    if (key_waits_.size() + static_cast<size_t>(fresh) > kMaxKeyWaits) return Forward(client, r);
    auto w = std::make_shared<LocalWait>();
    w->client = client.conn->id;
    w->missing = r.args.size();
    w->keys = std::move(r.args);
    client.waits.push_back(w);
    for (const auto& key : distinct) {
      KeyWait& kw = key_waits_[key];
      kw.waiters.push_back(w);
      if (kw.stream == 0) {
        StreamUse use;
        use.wait_key = key;
        kw.stream = NewStream(std::move(use));
        SendUp(FrameKind::kOpenShared, kw.stream, "");
        SendWaitUp(kw.stream, key);
        kw.seq = sent_;
      }
    }
  }

  void SendWaitUp(uint32_t stream, const std::string& key) {
    Request r;
    r.op = Op::kWait;
    r.args = {key};
    std::string o = V2Hello();
    EncodeRequest(Generation::kV2, r, o);
    SendUp(FrameKind::kData, stream, o);
    ++stats_.upstream_waits;
  }

  // The upstream WAIT of `key` was answered: `all` its local waiters have
  // the key (a store, an ADD, ...), or one of them has (a QUEUE_PUSH's
  // item, for one blocking pop).
  void KeyArrived(const std::string& key, bool all) {
    auto it = key_waits_.find(key);
    if (it == key_waits_.end()) return;
    KeyWait& kw = it->second;
    confirmed_ = std::max(confirmed_, kw.seq);
    std::vector<std::shared_ptr<LocalWait>> released;
    while (!kw.waiters.empty()) {
      auto w = std::move(kw.waiters.front());
      kw.waiters.pop_front();
      if (w->done) continue;
      // A push's item counts once, as the store's WakeOneWaiter counts it.
      size_t n = all ? static_cast<size_t>(std::count(w->keys.begin(), w->keys.end(), key)) : 1;
      w->missing -= std::min(w->missing, n);
      if (w->missing == 0) {
        w->done = true;
        released.push_back(w);
      }
      if (!all) break;
    }
    // After a push, the store keeps the WAIT for the others (WOKE_ONE);
    // after a change, it is answered for good.
    bool more = std::any_of(kw.waiters.begin(), kw.waiters.end(), [](auto& w) { return !w->done; });
    if (all || !more) {
      SendUp(FrameKind::kClose, kw.stream, "");
      streams_.erase(kw.stream);
      key_waits_.erase(it);
    }
    for (const auto& w : released) {
      Client* c = ClientOf(w->client);
      if (c == nullptr) continue;
      std::erase(c->waits, w);
      c->conn->Send(OneByte(kWaitStopWaiting));
    }
  }

  // CANCEL_WAIT: the client's local WAITs are forgotten and answered here
  // where the client is settled (above). Otherwise they are
  // cancelled when the store answers a CANCEL_WAIT sent after the client's
  // requests on the shared stream (which holds no WAIT, so it cancels
  // nothing there): where the store would have released one of them
  // before, its answer came first. A client that waits on its own stream
  // (a BARRIER) has its CANCEL_WAIT go up there, where the store answers it.
  void CancelWait(Client& client, const Request& r) {
    Unhold(client);
    bool settled = Settled(client);
    std::vector<std::shared_ptr<LocalWait>> waits = std::move(client.waits);
    client.waits.clear();
    if (client.upstream_wait) {
      Forward(client, r);
      if (waits.empty()) return;
    } else if (settled) {
      for (auto& w : waits) w->done = true;
      return client.conn->Send(OneByte(kWaitCanceled));
    }
    Request cancel;
    cancel.op = Op::kCancelWait;
    SendShared(cancel);
    Pending p;
    p.kind = Pending::Kind::kCancel;
    p.seq = sent_;
    p.canceller = client.conn->id;
    p.answer_cancel = !client.upstream_wait;
    p.cancels = std::move(waits);
    pending_.push_back(std::move(p));
    client.up_seq = sent_;
  }

  // Whether the store took the upstream WAIT of each of `w`'s keys still
  // waited on before an answer that came down since.
  bool Registered(const LocalWait& w) const {
    return std::all_of(w.keys.begin(), w.keys.end(), [this](const std::string& key) {
      auto it = key_waits_.find(key);
      return it == key_waits_.end() || it->second.seq <= confirmed_;
    });
  }

  void AnswerCancel(const Pending& p) {
    for (const auto& w : p.cancels) w->done = true;
    if (!p.answer_cancel) return;
    if (Client* c = ClientOf(p.canceller)) c->conn->Send(OneByte(kWaitCanceled));
  }

  // ---- everything else: the client's own stream ------------------------------

  void Forward(Client& client, const Request& r) {
    Unhold(client);
    Generation g = client.conn->generation();
    std::string o;
    if (client.stream == 0) {
      StreamUse use;
      use.client = client.conn->id;
      client.stream = NewStream(std::move(use));
      if (g == Generation::kV2) o = V2Hello();
    }
    // The parser made `r` from the client's bytes in its generation, so it
    // has an encoding there.
    EncodeRequest(g, r, o);
    if (r.op == Op::kBarrier || r.op == Op::kWait) client.upstream_wait = true;
    ++stats_.forwarded;
    SendUp(FrameKind::kData, client.stream, o);
    client.up_seq = sent_;
  }

  // ---- the link ---------------------------------------------------------------

  // Frames wait in up_out_ for the end of the loop's turn, so that what a
  // batch of readable clients sends up goes in one write: a WAIT's stream
  // opened and its WAIT, the ADDs and GETs of eight clients.
  void SendUp(FrameKind kind, uint32_t stream, std::string_view payload) {
    if (!linked_) return;
    // ADDs that wait go first: the store sees every request in the order
    // it came here.
    if (!adds_due_.empty()) SendDueAdds();
    ++epoch_;
    ++sent_;
    PutFrames(up_out_, kind, stream, payload);
    ScheduleFlush();
  }

  void ScheduleFlush() {
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(io_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->SendDueAdds();
      if (!self->up_writing_) self->FlushUp();
    });
  }

  void FlushUp() {
    if (up_out_.empty() || !linked_) return;
    up_writing_ = true;
    up_sending_.swap(up_out_);
    up_out_.clear();
    asio::async_write(link_, asio::buffer(up_sending_),
                      [self = shared_from_this()](std::error_code ec, size_t) {
                        self->up_writing_ = false;
                        self->up_sending_.clear();
                        if (ec) return self->LinkLost(ec.message());
                        self->FlushUp();
                      });
  }

  void ReadLink() {
    link_.async_read_some(
        asio::buffer(link_buf_), [self = shared_from_this()](std::error_code ec, size_t n) {
          if (ec) {
            return self->LinkLost(ec == asio::error::eof ? "the store closed it" : ec.message());
          }
          self->frames_.Append(self->link_buf_.data(), n);
          Frame f;
          while (self->linked_) {
            auto got = self->frames_.Next(&f);
            if (got == FrameDecoder::Result::kNeedMore) break;
            if (got == FrameDecoder::Result::kError) {
              return self->LinkLost(self->frames_.error());
            }
            self->OnFrame(f);
          }
          if (self->linked_) self->ReadLink();
        });
  }

  void OnFrame(const Frame& f) {
    ++epoch_;
    auto it = streams_.find(f.stream);
    if (it == streams_.end()) return;  // closed here meanwhile
    const StreamUse& use = it->second;
    if (use.shared_ops) {
      if (f.kind == FrameKind::kClose) return SharedStreamClosed();
      return OnSharedReply(f.payload);
    }
    if (!use.wait_key.empty()) {
      std::string key = use.wait_key;
      if (f.kind == FrameKind::kWokeOne) return KeyArrived(key, false);
      if (f.kind == FrameKind::kClose) return WaitStreamClosed(key);
      // One STOP_WAITING per byte; the stream has one WAIT out at a time.
      if (!f.payload.empty()) KeyArrived(key, true);
      return;
    }
    Client* c = ClientOf(use.client);
    if (c == nullptr) return;
    if (f.kind == FrameKind::kClose) {
      streams_.erase(it);
      c->stream = 0;
      return Drop(c->conn, "the store closed its stream (its log says why)");
    }
    c->conn->Send(f.payload);
  }

  void WaitStreamClosed(const std::string& key) {
    auto it = key_waits_.find(key);
    if (it == key_waits_.end()) return;
    auto waiters = std::move(it->second.waiters);
    streams_.erase(it->second.stream);
    key_waits_.erase(it);
    for (const auto& w : waiters) {
      if (w->done) continue;
      if (Client* c = ClientOf(w->client)) {
        Drop(c->conn, "the store closed a WAIT shared with it (its log says why)");
      }
    }
  }

  void LinkLost(const std::string& why) {
    if (!linked_) return;
    linked_ = false;
    log::Error("store relay: lost the link to the store at {}:{} ({}); closing its {} clients",
               options_.store_host, options_.store_port, why, clients_.size());
    std::error_code ec;
    link_.close(ec);
    std::vector<ConnectionPtr> all;
    for (auto& [id, c] : clients_) all.push_back(c.conn);
    for (auto& c : all) Drop(c, "");
  }

  asio::io_context& io_;
  RelayOptions options_;
  tcp::socket link_;
  bool linked_ = true;
  std::shared_ptr<Acceptor> acceptor_;
  std::array<char, 64 * 1024> read_buf_;  // the clients' shared read buffer
  std::array<char, 64 * 1024> link_buf_;
  FrameDecoder frames_;
  std::string up_out_, up_sending_;
  bool up_writing_ = false;
  bool flush_posted_ = false;  // ScheduleFlush's handler is queued
  // Counts every frame sent or received: a GET joins one on its way only
  // if nothing crossed the link since that one was sent.
  uint64_t epoch_ = 0;
  // Frames sent up, each request's frame numbered by it, and the number of
  // the latest request whose answer came down: every frame sent before it
  // took effect, and their answers came down before it.
  uint64_t sent_ = 0;
  uint64_t confirmed_ = 0;
  uint64_t last_client_ = 0;
  uint32_t next_stream_ = 1;
  std::unordered_map<uint64_t, Client> clients_;
  std::unordered_map<uint32_t, StreamUse> streams_;
  uint32_t shared_stream_ = 0;
  std::string shared_in_;
  std::deque<Pending> pending_;
  AddQueues adds_;
  std::vector<std::string> adds_due_;  // keys whose queued ADDs may go up
  std::unordered_map<std::string, std::shared_ptr<GetBatch>> gets_;
  std::unordered_map<std::string, KeyWait> key_waits_;
  RefusalLimiter refusals_;
  ConnectionList silent_;  // clients that sent nothing yet, oldest first
  PressureGuard pressure_;
  RelayStats stats_;
};

Result<int> Relay::Handshake(const RelayOptions& options) {
  std::string where = fmt::format("the store at {}:{}", options.store_host, options.store_port);
  auto client = StoreClient::Connect(options.store_host, options.store_port,
                                     options.connect_timeout, options.connect_timeout);
  if (!client.ok()) return client.status();
  // Without a token there is nothing to prove, and the exchange's first
  // step would leave its key in a store that asks for none, where torch's
  // clients count it (num_keys).
  if (!options.job_token.empty()) {
    TRUN_RETURN_IF_ERROR(ShowJobToken(*client, options.job_token, where));
  }
  auto answer = client->CompareSet(kLinkKey, "", kLinkVersion);
  if (!answer.ok() && options.job_token.empty()) {
    return Status::PermissionDenied(fmt::format(
        "{} closed the connection at the link's request: it asks for the job token, which this "
        "relay was not given; give every agent of the job the same TRUN_JOB_TOKEN ({})",
        where, answer.status().message()));
  }
  if (!answer.ok()) return answer.status();
  if (*answer != kLinkVersion) {
    return Status::Unsupported(fmt::format(
        "{} does not take a relay's link (it answered \"{}\" where {} was asked for): a trun "
        "store of an older release? Run every agent of the job with one release, or with "
        "--store-relay off",
        where, *answer, kLinkVersion));
  }
  int fd = client->ReleaseSocket();
  // The handshake's client waited with timeouts; the link's reads wait as
  // long as the job runs.
  timeval none{};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  return fd;
}

Result<std::unique_ptr<Relay>> Relay::Serve(asio::io_context& io, RelayOptions options,
                                            int link_fd) {
  if (options.raise_open_file_limit) RaiseOpenFileLimit();
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(link_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  tcp::socket link(io);
  std::error_code ec;
  link.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), link_fd, ec);
  if (ec) {
    ::close(link_fd);
    return Status::Internal(
        fmt::format("store relay: cannot use the link's socket: {}", ec.message()));
  }
  auto impl = std::make_shared<Impl>(io, std::move(options), std::move(link));
  TRUN_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

Result<std::unique_ptr<Relay>> Relay::Start(asio::io_context& io, RelayOptions options) {
  auto fd = Handshake(options);
  if (!fd.ok()) return fd.status();
  return Serve(io, std::move(options), *fd);
}

Relay::~Relay() { impl_->Close(); }
int Relay::port() const { return impl_->port(); }
size_t Relay::num_clients() const { return impl_->num_clients(); }
bool Relay::linked() const { return impl_->linked(); }
RelayStats Relay::stats() const { return impl_->stats(); }

}  // namespace trun::store
