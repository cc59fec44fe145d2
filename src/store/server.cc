#include "store/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <unordered_map>

#include "common/acceptor.h"
#include "common/log.h"
#include "common/net.h"
#include "common/strings.h"
#include "store/admission.h"
#include "store/auth.h"
#include "store/connection.h"
#include "store/connection_table.h"
#include "store/encode.h"
#include "store/handlers.h"
#include "store/keyspace.h"
#include "store/link.h"
#include "store/link_host.h"
#include "store/pressure.h"
#include "store/pressure_guard.h"
#include "store/process_limits.h"

namespace trun::store {

using asio::ip::tcp;

namespace {
// ProcessStoreStats' counters.
std::array<std::atomic<uint64_t>, kNumOps> g_requests{};
std::atomic<uint64_t> g_accepted{0}, g_closed{0}, g_dropped{0}, g_refused{0};
}  // namespace

class StoreServer::Impl : public std::enable_shared_from_this<StoreServer::Impl>,
                          public KeyspaceListener,
                          public ConnectionHost,
                          public LinkServer {
 public:
  Impl(asio::io_context& io, ServerOptions options)
      : options_(std::move(options)),
        io_(io),
        keys_(*this, options_.limits.max_value_bytes),
        pressure_(io, "the store", options_.max_partial_bytes, options_.max_queued_reply_bytes,
                  [this](uint64_t id, const std::string& why) {
                    if (Connection* c = connections_.Find(id)) Drop(ConnectionPtr(c), why);
                  }),
        links_(*this, keys_, options_.limits) {}

  Status Listen() {
    // As torch's libuv server: "" or "::" is every address over IPv6 and
    // IPv4 at once, or IPv4 alone where the kernel has IPv6 off.
    Acceptor::Callbacks cb;
    cb.admit = [this](const asio::ip::address& peer) { return AdmitPeer(peer); };
    cb.open = [this] { return connections_.size(); };
    cb.make_room = [this] { return MakeRoom(); };
    cb.refuse = [this](Acceptor::Socket&, const asio::ip::address& peer) { RefuseAtCap(peer); };
    cb.serve = [this](Acceptor::Socket s, const asio::ip::address& peer) {
      Serve(std::move(s), peer);
    };
    auto acceptor = Acceptor::Listen(
        io_, {options_.host, options_.port, "store", options_.max_connections}, std::move(cb));
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = std::move(*acceptor);
    return Status::OK();
  }

  void Close() {
    closed_ = true;
    if (acceptor_) acceptor_->Close();
    pressure_.Stop();
    connections_.ForEach([](const ConnectionPtr& c) { CloseSocket(*c); });
    silent_ = ConnectionList();
    connections_.Clear();
    nonces_.clear();
    links_.Clear();
    observer_ = nullptr;
    on_disconnect_ = nullptr;
    keys_.ForgetEveryone();
  }

  int port() const { return acceptor_->port(); }
  size_t num_keys() const { return keys_.num_keys(); }
  size_t num_connections() const { return connections_.size(); }
  size_t queued_reply_bytes() const { return pressure_.queued_reply_bytes(); }
  size_t num_waits() const { return keys_.num_waits(); }
  void Observe(std::string prefix, Observer observer, std::function<void(uint64_t)> on_disconnect) {
    observed_prefix_ = std::move(prefix);
    observer_ = std::move(observer);
    on_disconnect_ = std::move(on_disconnect);
  }

  std::optional<std::string> Lookup(const std::string& key) const {
    const std::string* v = keys_.Find(key);
    if (v == nullptr) return std::nullopt;
    return *v;
  }

  size_t ForgetLastRound(const std::string& keep_prefix) {
    // Closed before the erase, and unread: a worker that was killed, or
    // exited, with requests still in its socket is reaped by the agent's
    // loop (which is this one) before those bytes are read; read after
    // the erase, its last SET would be the next round's stale key (gloo's
    // peer address of a dead rank).
    std::vector<ConnectionPtr> workers;
    connections_.ForEach([&](const ConnectionPtr& c) {
      if (c->used_worker_keys && !c->link) workers.push_back(c);
    });
    for (const auto& c : workers) Drop(c, "");
    return keys_.EraseAllBut(keep_prefix);
  }

  void LocalSet(const std::string& key, std::string value) {
    current_conn_ = 0;
    keys_.Set(key, std::move(value));
  }

  std::string LocalCompareSet(const std::string& key, const std::string& expected,
                              std::string desired) {
    current_conn_ = 0;
    return keys_.CompareSet(key, expected, std::move(desired));
  }

  size_t connection_buffer_bytes() const {
    size_t n = 0;
    connections_.ForEach([&](const ConnectionPtr& c) { n += c->BufferBytes(); });
    return n;
  }

  size_t num_wait_index_entries() const { return keys_.num_wait_index_entries(); }

  // KeyspaceListener: what a request did for the other clients.
  void WaitDone(uint64_t owner, bool by_push) override {
    std::string o;
    PutU8(o, kWaitStopWaiting);
    if (Connection* c = connections_.Find(owner)) return c->Send(o);
    links_.WaitDone(owner, by_push, o);
  }

  void Watched(const std::vector<uint64_t>& watchers, uint8_t event, const std::string& key,
               std::string_view old_value, std::string_view new_value) override {
    std::string o;
    PutU8(o, event);
    PutBytes(o, key);
    PutBytes(o, old_value);
    PutBytes(o, new_value);
    for (uint64_t id : watchers) {
      // A send may drop another watcher's connection: look each one up.
      if (Connection* c = connections_.Find(id)) {
        c->Send(o);
      } else {
        links_.SendTo(id, o);
      }
    }
  }

  // Tells the observer, after the request that made the change has been
  // handled: it may then change keys itself without re-entering a handler.
  void Changed(const std::string& key, const std::string& value) override {
    if (!observer_ || !key.starts_with(observed_prefix_)) return;
    asio::post(io_, [cb = observer_, conn = current_conn_, key, value] { cb(conn, key, value); });
  }

 private:
  // The accept handler's check, before any byte is read: whether a client
  // from `peer` may stay (kept to the strangers' prefix or not).
  bool AdmitPeer(const asio::ip::address& peer) {
    if (members_.Contains(peer) || members_.StrangersServed()) return true;
    CountRefusal();
    LogRefusal(peer, "accept",
               fmt::format("store: refused a client from {}: not a host of the job's current "
                           "round; {}",
                           peer.to_string(), members_.allowlist()->widen_hint));
    return false;
  }

  void Serve(Acceptor::Socket s, const asio::ip::address& peer) {
    std::error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);
    ConnectionPtr c = Connection::Make(*this, std::move(s), ++last_conn_id_, peer);
    c->stranger = !members_.Contains(peer);
    connections_.Add(c);
    silent_.PushBack(*c);
    g_accepted.fetch_add(1, std::memory_order_relaxed);
    c->Start();
  }

  // At the connection cap: the oldest connection that has sent nothing
  // yet gives way to the newcomer; where every connection has spoken, it is
  // closed (RefuseAtCap).
  // Torch's own clients speak at once (2.x) or at their first request
  // (1.13, whose second, watching connection stays silent: only a flood
  // that fills the cap can close it, where it would otherwise meet EMFILE
  // with everyone else).
  bool MakeRoom() {
    if (Connection* oldest = silent_.front()) {
      if (connections_.Find(oldest->id) == oldest) {
        Drop(ConnectionPtr(oldest),
             fmt::format("{} connections, the store's cap (the open-file limit less a reserve "
                         "for the process's own work): the oldest that sent nothing gives way",
                         options_.max_connections));
        return true;
      }
    }
    return false;
  }

  void RefuseAtCap(const asio::ip::address& peer) {
    CountRefusal();
    LogRefusal(peer, "cap",
               fmt::format("store: refused a client from {}: {} connections, the store's cap, "
                           "all in use; raise the open-file limit (ulimit -n)",
                           peer.to_string(), options_.max_connections));
  }

 public:
  size_t SetAllowlist(std::optional<Allowlist> allow) {
    members_.Set(std::move(allow));
    if (!members_.allowlist()) {
      connections_.ForEach([](const ConnectionPtr& c) { c->stranger = false; });
      return 0;
    }
    std::vector<ConnectionPtr> gone;
    connections_.ForEach([&](const ConnectionPtr& c) {
      if (members_.Contains(c->peer())) {
        c->stranger = false;
      } else if (members_.StrangersServed() && !c->used_other_keys) {
        c->stranger = true;
      } else {
        gone.push_back(c);
      }
    });
    for (const auto& c : gone) {
      log::Info("store: closed the connection of {}: no longer a host of the job's current round",
                c->peer().to_string());
      CountRefusal();
      Drop(c, "");
    }
    return gone.size();
  }

  uint64_t num_refused() const { return refused_; }

  void RequireJobToken(std::string token) { job_token_ = std::move(token); }

  std::optional<asio::ip::address> PeerOf(uint64_t conn) const {
    Connection* c = connections_.Find(conn);
    if (c == nullptr) return std::nullopt;
    return c->peer();
  }

 private:
  // The admission rule's verdict on `r` (admission.h). Returns false when
  // the request was answered here (the job token's exchange) or refused;
  // `untrun` says to leave trun's keys out of the answer.
  bool Admitted(const ConnectionPtr& c, const Request& r, bool& untrun) {
    Admission a = Admit(r, StandingOf(*c));
    switch (a.verdict) {
      case Verdict::kServe:
      case Verdict::kServeUntrun:
        // A member's connection that used other keys is closed, not
        // demoted, once its host leaves the round.
        if (a.beyond_prefix) c->used_other_keys = true;
        if (a.names_other_keys) c->used_worker_keys = true;
        untrun = a.verdict == Verdict::kServeUntrun;
        return true;
      case Verdict::kAuthNonce: {
        std::string& nonce = nonces_[c->id] = NewAuthNonce();
        std::string o;
        PutBytes(o, nonce);
        c->Send(o);
        return false;
      }
      case Verdict::kAuthProof:
        CheckProof(c, r);
        return false;
      case Verdict::kRefuseTrunKeys:
      case Verdict::kRefuseStranger:
        RefuseRequest(c, a.verdict, r.op);
        return false;
    }
    return false;
  }

  Standing StandingOf(const Connection& c) const {
    Standing s;
    s.token_asked = !job_token_.empty();
    s.proven = c.proven;
    if (members_.allowlist()) s.strangers_prefix = members_.allowlist()->strangers_prefix;
    s.stranger = c.stranger;
    return s;
  }

  void RefuseRequest(const ConnectionPtr& c, Verdict verdict, Op op) {
    if (verdict == Verdict::kRefuseTrunKeys) {
      Refuse(c, "trun's keys",
             fmt::format("store: refused {} from {}: trun's keys need the job token, which "
                         "this client has not shown; every agent of the job needs the same "
                         "TRUN_JOB_TOKEN",
                         OpName(op), c->peer().to_string()));
    } else {
      Refuse(c, "stranger",
             fmt::format("store: refused {} from {}: not a host of the job's current round, "
                         "which may use only the rendezvous's keys; {}",
                         OpName(op), c->peer().to_string(), members_.allowlist()->widen_hint));
    }
  }

  // The unfinished request's keys, as soon as each is parsed: a request
  // the admission rule refuses is closed before its value is read, so a
  // client without the token cannot make the store buffer a value under
  // trun's keys. Only refusals are final here; the token's exchange and
  // everything served are decided when the request is whole. Returns
  // false when `c` was closed.
  bool JudgePending(const ConnectionPtr& c) {
    const Request* p = c->parser() ? c->parser()->pending() : nullptr;
    if (p == nullptr || p->args.size() == c->judged_args) return true;
    c->judged_args = static_cast<uint32_t>(p->args.size());
    Admission a = Admit(*p, StandingOf(*c));
    if (a.verdict != Verdict::kRefuseTrunKeys && a.verdict != Verdict::kRefuseStranger) {
      return true;
    }
    RefuseRequest(c, a.verdict, p->op);
    return false;
  }

  // The job token's exchange, step 2 (auth.h): the agent's proof for this
  // connection's nonce, and its own nonce, which the store's answer proves
  // the token with. A refusal is answered, then the connection closed: a
  // guess costs a connection.
  void CheckProof(const ConnectionPtr& c, const Request& r) {
    // A nonce is good for one proof: a replay, here or elsewhere, fails.
    std::string nonce;
    if (auto it = nonces_.find(c->id); it != nonces_.end()) {
      nonce = std::move(it->second);
      nonces_.erase(it);
    }
    ProofAnswer a = AnswerProof(job_token_, nonce, r.args[1], r.args[2]);
    std::string o;
    PutBytes(o, a.answer);
    c->Send(o);
    if (a.ok) {
      c->proven = true;
      return;
    }
    const std::string& answer = a.answer;
    Refuse(c, answer,
           fmt::format("store: {} from {}; every agent of the job needs the same TRUN_JOB_TOKEN",
                       answer, c->peer().to_string()));
  }

  void CountRefusal() {
    g_refused.fetch_add(1, std::memory_order_relaxed);
    ++refused_;
  }

  // Closes `c` once what it was last answered is sent, counts the refusal,
  // and logs `line` as LogRefusal allows.
  void Refuse(const ConnectionPtr& c, const std::string& reason, const std::string& line) {
    CountRefusal();
    LogRefusal(c->peer(), reason, line);
    if (c->Sending()) {
      c->closing = true;
    } else {
      Drop(c, "");
    }
  }

  // Refusals are logged at most once a minute per source address and
  // reason, with how many were not logged since: a client that guesses the
  // token or probes in a loop costs a line a minute, not one per try, and
  // one with thousands of addresses a line a minute more (pressure.h). No
  // source is ever banned for them: a prober on a member host must not
  // lock out its real agent.
  void LogRefusal(const asio::ip::address& source, const std::string& reason,
                  const std::string& line) {
    if (auto l = refusals_.Line(source.to_string(), reason, line, Clock::now())) {
      log::Warning("{}", *l);
    }
  }

  void Drop(const ConnectionPtr& c, const std::string& why) override {
    if (c->closed) return;
    if (!why.empty()) {
      g_dropped.fetch_add(1, std::memory_order_relaxed);
      asio::ip::address address;
      std::string name = c->RemoteName(&address);
      // Limited as refusals are: a client that breaks the protocol in a
      // loop costs a line a minute.
      LogRefusal(Unmapped(address), why, fmt::format("store: dropped client {}: {}", name, why));
    }
    pressure_.Remove(c->id);
    silent_.Erase(*c);
    keys_.Forget(c->id);
    links_.Forget(c->id);
    nonces_.erase(c->id);
    CloseSocket(*c);
    connections_.Erase(c->id);
    if (on_disconnect_) {
      asio::post(io_, [cb = on_disconnect_, id = c->id] { cb(id); });
    }
  }

  // A whole request: admitted (admission.h), then its handler (handlers.h).
  void Handle(const ConnectionPtr& c, Request& r) override {
    bool untrun = false;
    if (!Admitted(c, r, untrun)) return;
    if (r.op == Op::kCompareSet && r.args[0] == kLinkKey) return links_.Open(c, r);
    Outcome out = HandleFor(c, c->id, r, untrun);
    if (out.kind == Outcome::kReply) c->Send(out.bytes);
    if (out.kind == Outcome::kDrop) Drop(c, out.bytes);
  }

  // LinkServer: what a relay's streams need of the server (link_host.h).
  Outcome HandleFor(const ConnectionPtr& c, uint64_t owner, Request& r, bool untrun) override {
    current_conn_ = c->id;
    g_requests[static_cast<size_t>(r.op)].fetch_add(1, std::memory_order_relaxed);
    return HandleRequest(keys_, r, {owner, untrun, c->ReplyRoom()});
  }

  uint64_t NewOwner() override { return ++last_conn_id_; }

  // A stream's request is judged as a connection without the job token
  // is: a relay's clients are torch's workers, which never prove it.
  Admission AdmitStreamRequest(const Request& r) override {
    Standing standing;
    standing.token_asked = !job_token_.empty();
    return Admit(r, standing);
  }

  void StreamDropped(const asio::ip::address& peer, const std::string& why,
                     const std::string& line) override {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    LogRefusal(peer, why, line);
  }

  bool LinkBytes(const ConnectionPtr& c, const char* data, size_t n) override {
    return links_.Bytes(c, data, n) && Hold(c, n);
  }

  bool AfterRead(const ConnectionPtr& c, size_t arrived) override {
    return JudgePending(c) && Hold(c, arrived);
  }

  // Books what `c`'s unfinished request holds after `arrived` bytes, and
  // closes connections over the budgets (pressure_guard.h). Returns false
  // when `c` was closed.
  bool Hold(const ConnectionPtr& c, size_t arrived) {
    pressure_.AfterRead(c->id, arrived, links_.HeldBy(*c));
    return !c->closed;
  }

  void RepliesQueued(Connection& c, size_t queued, bool drained) override {
    pressure_.RepliesQueued(c.id, queued, drained);
  }

  void Spoke(Connection& c) override { silent_.Erase(c); }
  const Limits& limits() const override { return options_.limits; }
  size_t max_pending_reply_bytes() const override { return options_.max_pending_reply_bytes; }
  std::array<char, 64 * 1024>& read_buf() override { return read_buf_; }

  // Closes `c`'s socket, counted once.
  static void CloseSocket(Connection& c) {
    if (!c.closed) g_closed.fetch_add(1, std::memory_order_relaxed);
    c.Close();
  }

  ServerOptions options_;
  // Shared by every connection for the reads after a full small buffer;
  // one thread, and the bytes are copied into the parser before anything
  // else runs.
  std::array<char, 64 * 1024> read_buf_;
  asio::io_context& io_;
  std::shared_ptr<Acceptor> acceptor_;
  bool closed_ = false;
  ConnectionTable<ConnectionPtr> connections_;
  // The job token's nonces (auth.h) from when each is asked for until it is
  // used, by connection: a few agents' connections at a time, not a field
  // of every connection.
  std::unordered_map<uint64_t, std::string> nonces_;
  Keyspace keys_;
  uint64_t last_conn_id_ = 0;
  Members members_;
  std::string job_token_;  // "" when none is asked for
  uint64_t refused_ = 0;
  RefusalLimiter refusals_;
  PressureGuard pressure_;
  ConnectionList silent_;      // connections that sent nothing yet, oldest first
  uint64_t current_conn_ = 0;  // the connection whose request is being handled
  std::string observed_prefix_;
  Observer observer_;
  std::function<void(uint64_t)> on_disconnect_;
  LinkHost links_;  // the relays' links: after keys_, which it uses
};

Result<std::unique_ptr<StoreServer>> StoreServer::Start(asio::io_context& io,
                                                        ServerOptions options) {
  if (options.raise_open_file_limit) RaiseOpenFileLimit();
  ReturnLargeBuffersWhenFreed();
  if (options.max_connections == 0) options.max_connections = DefaultMaxConnections();
  auto impl = std::make_shared<Impl>(io, std::move(options));
  TRUN_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

StoreServer::~StoreServer() { impl_->Close(); }
int StoreServer::port() const { return impl_->port(); }
size_t StoreServer::num_keys() const { return impl_->num_keys(); }
size_t StoreServer::num_connections() const { return impl_->num_connections(); }
size_t StoreServer::queued_reply_bytes() const { return impl_->queued_reply_bytes(); }
size_t StoreServer::num_waits() const { return impl_->num_waits(); }
size_t StoreServer::num_wait_index_entries() const { return impl_->num_wait_index_entries(); }
size_t StoreServer::connection_buffer_bytes() const { return impl_->connection_buffer_bytes(); }
void StoreServer::Observe(std::string prefix, Observer observer,
                          std::function<void(uint64_t)> on_disconnect) {
  impl_->Observe(std::move(prefix), std::move(observer), std::move(on_disconnect));
}
std::optional<std::string> StoreServer::Get(const std::string& key) const {
  return impl_->Lookup(key);
}
size_t StoreServer::ForgetLastRound(const std::string& keep_prefix) {
  return impl_->ForgetLastRound(keep_prefix);
}
void StoreServer::RequireJobToken(std::string token) { impl_->RequireJobToken(std::move(token)); }
std::optional<asio::ip::address> StoreServer::PeerOf(uint64_t conn) const {
  return impl_->PeerOf(conn);
}

size_t StoreServer::SetAllowlist(std::optional<Allowlist> allowlist) {
  return impl_->SetAllowlist(std::move(allowlist));
}
uint64_t StoreServer::num_refused() const { return impl_->num_refused(); }
void StoreServer::Set(const std::string& key, std::string value) {
  impl_->LocalSet(key, std::move(value));
}
std::string StoreServer::CompareSet(const std::string& key, const std::string& expected,
                                    std::string desired) {
  return impl_->LocalCompareSet(key, expected, std::move(desired));
}

StoreStats ProcessStoreStats() {
  StoreStats s;
  for (size_t i = 0; i < kNumOps; ++i)
    s.requests[i] = g_requests[i].load(std::memory_order_relaxed);
  s.connections_accepted = g_accepted.load(std::memory_order_relaxed);
  s.connections_closed = g_closed.load(std::memory_order_relaxed);
  s.clients_refused = g_refused.load(std::memory_order_relaxed);
  s.clients_dropped = g_dropped.load(std::memory_order_relaxed);
  LinkCounts links = ProcessLinkCounts();
  s.links_opened = links.opened;
  s.links_closed = links.closed;
  return s;
}

}  // namespace trun::store
