// FakeWorld and FakeMedium: an in-process Medium (medium.h) for unit tests
// of the participant and the coordinator together (participant_test.cc).
// Test-only: nothing in trun links it.
//
// The world plays the store and its host: a key-value map whose waits wake
// when a key is set, and a Coordinator fed every key a node or the
// coordinator writes (as StoreServer::Observe feeds HostedCoordinator),
// on a virtual clock that only Advance() moves. A test decides what
// happens to the network: a node's connections close (Cut), its heartbeats
// are lost on the way (Silence), the host dies (KillHost) or stops
// answering (Hang). A surviving node whose medium allows it takes the host's
// place (TakeOver) with a fresh store, as docs/rendezvous.md describes.
//
// Thread-safety: FakeWorld's methods may be called from any thread (one
// mutex; a wait in Await() releases it). A FakeLink is as Link says.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "rendezvous/coordinator.h"
#include "rendezvous/medium.h"

namespace trun::rendezvous::fake {

class FakeWorld {
 public:
  // `options` are every host's coordinator's; host_id is set to the host.
  explicit FakeWorld(CoordinatorOptions options) : options_(std::move(options)) {}

  // ---- the test's side -------------------------------------------------------

  Clock::time_point Now() const {
    std::lock_guard lk(mu_);
    return now_;
  }
  // Moves the virtual clock; the host's coordinator, unless it hangs, sees
  // its deadlines pass as its timer would make it.
  void Advance(Duration d) {
    std::lock_guard lk(mu_);
    now_ += d;
    auto next = coordinator_ && !hung_ ? coordinator_->NextDeadline() : std::nullopt;
    if (next && *next <= now_) {
      coordinator_->OnTimer(now_);
      Apply();
    }
  }
  // The host dies, and its store with it: every connection to it fails,
  // and `host` may not connect again.
  void KillHost() {
    std::lock_guard lk(mu_);
    cut_.insert(host_);
    coordinator_.reset();
    kv_.clear();
    host_.clear();
    hung_ = false;
    ++generation_;
    cv_.notify_all();
  }
  // The host stops answering (cut off from the network, its connections
  // open): requests time out, waits never end.
  void Hang() {
    std::lock_guard lk(mu_);
    hung_ = true;
  }
  // Every connection of `node` closes, and it cannot connect again.
  void Cut(const std::string& node) {
    std::lock_guard lk(mu_);
    cut_.insert(node);
    for (const auto& [conn, c] : conns_) {
      if (c.node == node && c.generation == generation_ && coordinator_) {
        coordinator_->OnDisconnect(conn, now_);
        Apply();
      }
    }
    cv_.notify_all();
  }
  // `node`'s heartbeats are lost on the way; it does not know.
  void Silence(const std::string& node) {
    std::lock_guard lk(mu_);
    silenced_.insert(node);
  }
  std::string host() const {
    std::lock_guard lk(mu_);
    return host_;
  }
  // How many of `node`'s heartbeats reached a host.
  int64_t Heartbeats(const std::string& node) const {
    std::lock_guard lk(mu_);
    auto it = heartbeats_.find(node);
    return it == heartbeats_.end() ? 0 : it->second;
  }
  // Whether `node` has asked the current host for a round (ready/, or
  // "ready" in its join).
  bool Ready(const std::string& node) const {
    std::lock_guard lk(mu_);
    return ready_.count(node) > 0;
  }

  // ---- the medium's side -----------------------------------------------------

  // `node` hosts the coordinator from now on, with an empty store; false if
  // somebody hosts already or `node` is dead.
  bool Host(const std::string& node) {
    std::lock_guard lk(mu_);
    if (!host_.empty() || cut_.count(node)) return false;
    host_ = node;
    ready_.clear();
    next_seq_ = 0;
    CoordinatorOptions o = options_;
    o.host_id = node;
    coordinator_.emplace(std::move(o), now_);
    return true;
  }
  Result<uint64_t> Open(const std::string& node) {
    std::lock_guard lk(mu_);
    if (host_.empty() || cut_.count(node)) return Status::IOError("connection refused");
    if (hung_) return Status::Timeout("connect timed out");
    conns_[++next_conn_] = {node, generation_};
    return next_conn_;
  }
  void Close(uint64_t conn) {
    std::lock_guard lk(mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end()) return;
    if (it->second.generation == generation_ && coordinator_ && !hung_) {
      coordinator_->OnDisconnect(conn, now_);
      Apply();
    }
    conns_.erase(it);
  }
  Result<int64_t> Join(uint64_t conn, const std::string& info) {
    std::lock_guard lk(mu_);
    TRUN_RETURN_IF_ERROR(Check(conn));
    int64_t seq = ++next_seq_;
    auto j = nlohmann::json::parse(info, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("ready")) ready_.insert(conns_[conn].node);
    Store(conn, fmt::format("node/{}", seq), info, false);
    return seq;
  }
  Status Put(uint64_t conn, const std::string& key, const std::string& value, bool if_absent) {
    std::lock_guard lk(mu_);
    TRUN_RETURN_IF_ERROR(Check(conn));
    if (key.starts_with("ready/")) ready_.insert(conns_[conn].node);
    Store(conn, key, value, if_absent);
    return Status::OK();
  }
  Status Heartbeat(uint64_t conn, int64_t seq) {
    std::lock_guard lk(mu_);
    TRUN_RETURN_IF_ERROR(Check(conn));
    const std::string& node = conns_[conn].node;
    if (silenced_.count(node)) return Status::OK();
    ++heartbeats_[node];
    Store(conn, fmt::format("hb/{}", seq), "1", false);
    return Status::OK();
  }
  // Waits until `key` exists, the connection fails or `aborted` is set.
  Result<std::string> Await(uint64_t conn, const std::string& key, const bool& aborted) {
    std::unique_lock lk(mu_);
    while (true) {
      if (aborted) return Status::IOError("aborted");
      TRUN_RETURN_IF_ERROR(Check(conn, /*waiting=*/true));
      if (auto it = kv_.find(key); it != kv_.end() && !hung_) return it->second;
      cv_.wait(lk);
    }
  }
  // Sets `flag` (an Await's `aborted`) and wakes the waits.
  void Abort(bool& flag) {
    std::lock_guard lk(mu_);
    flag = true;
    cv_.notify_all();
  }

 private:
  struct Conn {
    std::string node;
    uint64_t generation = 0;
  };

  // Whether a request on `conn` gets an answer. A hung host answers none;
  // a wait on it just goes on.
  Status Check(uint64_t conn, bool waiting = false) {
    auto it = conns_.find(conn);
    if (it == conns_.end() || it->second.generation != generation_ || !coordinator_ ||
        cut_.count(it->second.node)) {
      return Status::IOError("connection reset by peer");
    }
    if (hung_ && !waiting) return Status::Timeout("no answer within the op timeout");
    return Status::OK();
  }
  // A write to the store, which the coordinator observes (its own too).
  void Store(uint64_t conn, const std::string& key, const std::string& value, bool if_absent) {
    if (if_absent && kv_.count(key)) return;
    kv_[key] = value;
    cv_.notify_all();
    coordinator_->OnKey(conn, key, value, now_);
    Apply();
  }
  void Apply() {
    for (const auto& w : coordinator_->TakeWrites()) Store(0, w.key, w.value, w.if_absent);
  }

  const CoordinatorOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point now_{};
  std::optional<Coordinator> coordinator_;
  std::string host_;
  bool hung_ = false;
  uint64_t generation_ = 0;  // one more each time a host dies
  std::map<std::string, std::string> kv_;
  int64_t next_seq_ = 0;
  uint64_t next_conn_ = 0;
  std::map<uint64_t, Conn> conns_;
  std::set<std::string> cut_;
  std::set<std::string> silenced_;
  std::set<std::string> ready_;
  std::map<std::string, int64_t> heartbeats_;
};

class FakeLink final : public Link {
 public:
  FakeLink(FakeWorld& world, uint64_t conn) : world_(world), conn_(conn) {}
  ~FakeLink() override { world_.Close(conn_); }

  Result<int64_t> Join(const std::string& info) override { return world_.Join(conn_, info); }
  Status Put(const std::string& key, const std::string& value) override {
    return world_.Put(conn_, key, value, false);
  }
  Status PutIfAbsent(const std::string& key, const std::string& value) override {
    return world_.Put(conn_, key, value, true);
  }
  Result<std::string> Await(const std::string& key) override {
    return world_.Await(conn_, key, aborted_);
  }
  Status Heartbeat(int64_t seq) override { return world_.Heartbeat(conn_, seq); }
  void Abort() override { world_.Abort(aborted_); }
  std::string LocalAddress() const override { return "10.0.0.1"; }

 private:
  FakeWorld& world_;
  const uint64_t conn_;
  bool aborted_ = false;  // under the world's mutex
};

class FakeMedium final : public Medium {
 public:
  // `hosts`: this node hosts the coordinator from Start(); `may_take_over`:
  // it may take the host's place (it owns the endpoint's address).
  FakeMedium(FakeWorld& world, std::string node, bool hosts, bool may_take_over)
      : world_(world), node_(std::move(node)), hosts_(hosts), may_take_over_(may_take_over) {}

  Status Start() override {
    if (hosts_ && !world_.Host(node_)) return Status::InvalidArgument("the fake store is hosted");
    return Status::OK();
  }
  Result<std::unique_ptr<Link>> Connect(Clock::time_point, Duration) override {
    auto conn = world_.Open(node_);
    if (!conn.ok()) {
      // As a real connect takes a moment: the participant's retries must
      // not spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return conn.status();
    }
    return std::unique_ptr<Link>(std::make_unique<FakeLink>(world_, *conn));
  }
  bool MayTakeOver() const override { return may_take_over_; }
  bool TakeOver(const std::function<bool()>&) override {
    return may_take_over_ && world_.Host(node_);
  }
  std::string Where() const override { return "the fake store"; }
  std::string NoTakeOverReason() const override { return "no fake node may serve the endpoint"; }
  void Linger(Duration, std::function<void()> then) override { then(); }
  void Stop() override {}

 private:
  FakeWorld& world_;
  const std::string node_;
  const bool hosts_;
  const bool may_take_over_;
};

}  // namespace trun::rendezvous::fake
