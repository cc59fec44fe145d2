#include "rendezvous/etcd_medium.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "rendezvous/hosted_coordinator.h"
#include "store/server.h"

namespace trun::rendezvous {
namespace {

using json = nlohmann::json;

// Where a node's join key lives under its epoch's keys (JoinKeys).
constexpr std::string_view kJoin = "join/";

// The coordinator as the nodes know it: the epoch its key was created at and
// the lease everything it owns lives under.
struct Epoch {
  int64_t number = 0;
  int64_t lease = 0;
};

// What every link and the host share: the options; per join, the lease
// that keeps the node alive (the control thread heartbeats a node that the
// main thread's link joined) and when etcd last renewed it; and the
// coordinator this node last read in etcd.
struct Shared {
  Options o;
  EtcdOptions etcd;  // with the request timeout the medium uses
  std::string prefix;
  std::string coord_key;
  std::chrono::seconds ttl{5};
  // A node's lease is renewed at its first beat this long after the last
  // renewal: half the lease less half a beat, so that a late beat still
  // renews well within it.
  Duration renew_after{0};

  std::mutex mu;
  struct Lease {
    int64_t id = 0;
    Clock::time_point renewed;
  };
  std::map<int64_t, Lease> lease_of_seq;
  // The epoch that the last read of `coord` found (and the address etcd saw
  // this host at): the next link takes it rather than reading `coord`
  // again. Of 1,000 nodes joining at once, each read it three times (the
  // try to coordinate, the main thread's link, the control thread's); etcd
  // spends about 0.4 ms of CPU on every request through its gateway. A link
  // that finds its epoch gone forgets it, and the main thread's next try to
  // coordinate reads it afresh.
  std::optional<Epoch> known;
  std::string known_address;

  void Know(std::optional<Epoch> epoch, const std::string& address) {
    std::lock_guard lk(mu);
    known = epoch;
    if (!address.empty()) known_address = address;
  }

  std::string EpochPrefix(int64_t epoch) const { return fmt::format("{}e{}/", prefix, epoch); }
};

std::optional<Epoch> ParseCoord(const std::vector<KeyValue>& kvs) {
  if (kvs.empty()) return std::nullopt;
  json j = json::parse(kvs[0].value, nullptr, /*allow_exceptions=*/false);
  Epoch e{kvs[0].create_revision, j.is_object() ? j.value("lease", int64_t{0}) : 0};
  return e;
}

class EtcdLink final : public Link {
 public:
  // `local_address`: how etcd saw this host when the link was made.
  EtcdLink(std::shared_ptr<Shared> shared, Epoch epoch, std::string local_address)
      : s_(std::move(shared)),
        epoch_(epoch),
        keys_(s_->EpochPrefix(epoch.number)),
        client_(s_->etcd),
        local_address_(std::move(local_address)) {}

  ~EtcdLink() override {
    if (lease_ == 0) return;
    {
      std::lock_guard lk(s_->mu);
      s_->lease_of_seq.erase(seq_);
    }
    // Our keys go at once rather than at the lease's expiry, so the
    // coordinator need not wait a heartbeat timeout to count us out. Our own
    // client may be aborted: a fresh one, briefly.
    EtcdOptions quick = s_->etcd;
    quick.timeout = std::chrono::milliseconds(1000);
    EtcdClient c(quick);
    (void)c.Revoke(lease_);
  }

  // One put under a lease of the join's own, only while our coordinator is
  // (a later Await need not read `coord`): its revision is the node's
  // sequence number, unique and in the order the nodes joined. The key is
  // named by the lease (unique in the cluster, where node ids are only
  // likely to be), as the sequence number is not known before the put; the
  // coordinator's host reads it back from the revision (JoinKeys).
  Result<int64_t> Join(const std::string& info) override {
    auto lease = client_.GrantLease(s_->ttl);
    if (!lease.ok()) return lease.status();
    lease_ = *lease;
    auto put = client_.PutWhile(fmt::format("{}{}{}", keys_, kJoin, lease_), info, lease_,
                                s_->coord_key, epoch_.number);
    if (!put.ok()) return put.status();
    if (*put == 0) return Gone();
    seq_ = floor_ = *put;
    {
      std::lock_guard lk(s_->mu);
      s_->lease_of_seq[seq_] = {lease_, Clock::now()};
    }
    return seq_;
  }

  // Under the coordinator's lease: a put succeeds only while it is there.
  Status Put(const std::string& key, const std::string& value) override {
    return client_.Put(keys_ + key, value, epoch_.lease).status();
  }

  Status PutIfAbsent(const std::string& key, const std::string& value) override {
    return client_.PutIfAbsent(keys_ + key, value, epoch_.lease).status();
  }

  // Every key a node awaits is written after the coordinator read this
  // node's join: one watch from the revision after it, open as long as the
  // link, sees this node's assignments, every round's end and any change of
  // coordinator, without reading any of them first (etcd spends about
  // 0.4 ms of CPU on each request through its gateway, and more on each new
  // watch and connection). A round's list of nodes (round/, which only some
  // nodes read and which is large) is written before its assignments: one
  // read finds it, else a watch of its own waits for it.
  Result<std::string> Await(const std::string& key) override {
    const std::string full = keys_ + key;
    if (floor_ != 0 && (key.starts_with("assign/") || key.starts_with("end/"))) {
      return AwaitStreamed(full);
    }
    auto snap = client_.Get({{full, ""}, {s_->coord_key, ""}});
    if (!snap.ok()) return snap.status();
    auto coord = ParseCoord(snap->ranges[1]);
    if (!coord || coord->number != epoch_.number) return Gone();
    if (!snap->ranges[0].empty()) return snap->ranges[0][0].value;
    std::optional<std::string> value;
    bool gone = false;
    Status s = client_.Watch({{full, ""}, {s_->coord_key, ""}}, snap->revision + 1,
                             [&](const WatchEvent& e) {
                               if (e.kv.key == s_->coord_key) {
                                 gone = true;
                                 return false;
                               }
                               if (e.kv.key != full || e.deleted) return true;
                               value = e.kv.value;
                               return false;
                             });
    if (gone) return Gone();
    if (!s.ok()) return s;
    return *value;
  }

  Status Heartbeat(int64_t seq) override {
    int64_t lease = 0;
    {
      std::lock_guard lk(s_->mu);
      auto it = s_->lease_of_seq.find(seq);
      if (it == s_->lease_of_seq.end()) return Status::OK();  // the main thread is joining anew
      // Renewed about every half lease, not every beat: etcd spends about
      // 0.4 ms of CPU on each keep-alive, and 1,000 nodes beating once a
      // second were a sixth of its requests while they joined. The lease
      // was granted (renewed) at the join: the first beats send nothing.
      if (Clock::now() - it->second.renewed < s_->renew_after) return Status::OK();
      lease = it->second.id;
    }
    TRUN_RETURN_IF_ERROR(client_.KeepAlive(lease));
    std::lock_guard lk(s_->mu);
    auto it = s_->lease_of_seq.find(seq);
    if (it != s_->lease_of_seq.end() && it->second.id == lease) it->second.renewed = Clock::now();
    return Status::OK();
  }

  void Abort() override {
    // aborted_ first: a probe failing on the abort then finds it set.
    std::lock_guard lk(watch_mu_);
    aborted_ = true;
    client_.Abort();
    if (watch_) watch_->Abort();
  }
  std::string LocalAddress() const override {
    std::string a = client_.LocalAddress();
    return a.empty() ? local_address_ : a;
  }

 private:
  Status Gone() const {
    {
      std::lock_guard lk(s_->mu);
      if (s_->known && s_->known->number == epoch_.number) s_->known.reset();
    }
    return Status::IOError(fmt::format("the coordinator of epoch {} is gone", epoch_.number));
  }

  // Waits for `full` on the link's watch, opened at the first wait.
  //
  // A node waiting for its assignment looks now and then (after two
  // heartbeat timeouts, then twice as long each time up to kLastProbe)
  // whether its coordinator is still there, as its watch should have told:
  //  - `coord` gone or another's while the watch said nothing: the node
  //    goes on as if it had heard. etcd 3.4.23's gateway sometimes leaves
  //    the later watchers of a request uncreated, and CI twice saw a
  //    survivor wait 60 s so; EtcdClient::OpenWatch now awaits every
  //    `created`, so this is a second line of defence;
  //  - `coord` there, its lease expired and not revoked: revoking is a
  //    commit, and an etcd whose disk holds commits past its request
  //    timeout fails it and tries again seconds later, while reads still
  //    answer; the node says so, once, and waits;
  //  - etcd does not answer: the node says so at each probe.
  // A wait for a round's end is not probed: the workers run meanwhile, and
  // a round may last days.
  static constexpr Duration kLastProbe{60'000};

  Result<std::string> AwaitStreamed(const std::string& full) {
    if (auto it = seen_.find(full); it != seen_.end()) {
      std::string value = std::move(it->second);
      seen_.erase(it);
      return value;
    }
    if (!watch_) {
      auto watch = std::make_unique<EtcdClient>(s_->etcd);
      {
        std::lock_guard lk(watch_mu_);
        if (aborted_) return Status::IOError("etcd: aborted");
        watch_ = std::move(watch);
      }
      const std::string assign = fmt::format("{}assign/{}/", keys_, seq_);
      const std::string end = keys_ + "end/";
      Status opened = watch_->OpenWatch(
          {{assign, PrefixEnd(assign)}, {end, PrefixEnd(end)}, {s_->coord_key, ""}}, floor_ + 1);
      if (!opened.ok()) {
        std::lock_guard lk(watch_mu_);
        watch_.reset();  // a later wait opens one anew
        return opened;
      }
    }
    const bool assignment = full.starts_with(keys_ + "assign/");
    const auto since = std::chrono::steady_clock::now();
    Duration probe_in = 2 * s_->o.heartbeat_timeout;
    auto next_probe = since + probe_in;
    bool said = false;
    while (true) {
      auto next = watch_->NextEventBefore(
          assignment ? next_probe : std::chrono::steady_clock::time_point::max());
      if (!next.ok()) return next.status();
      if (!*next) {
        if (Probe(since, said) == Probed::kGone) return Gone();
        probe_in = std::min(probe_in * 2, kLastProbe);
        next_probe = std::chrono::steady_clock::now() + probe_in;
        continue;
      }
      WatchEvent& e = **next;
      if (e.kv.key == s_->coord_key) return Gone();
      if (e.deleted) continue;
      if (e.kv.key == full) return std::move(e.kv.value);
      // Another round's end, or an assignment asked for before: kept for
      // its own wait.
      seen_[e.kv.key] = std::move(e.kv.value);
    }
  }

  enum class Probed { kThere, kGone };

  // What AwaitStreamed's probe finds (no assignment since `since`); `said`:
  // whether the node said already that the lease expired unrevoked.
  Probed Probe(std::chrono::steady_clock::time_point since, bool& said) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - since);
    const auto silent = [&](const Status& why) {
      {
        std::lock_guard lk(watch_mu_);
        if (aborted_) return Probed::kThere;  // the node gives this link up: nothing to say
      }
      log::Warning(
          "rendezvous: no round for this node after {} s, and etcd at {} does not say whether the "
          "coordinator (epoch {}) is alive: {}; if etcd is stalled, its log says why (slow disk "
          "syncs, 'failed to revoke')",
          waited.count(), client_.Endpoint(), epoch_.number, why.message());
      return Probed::kThere;
    };
    // A serializable read: it answers while etcd's commits are held up.
    auto snap = client_.Get({{s_->coord_key, ""}}, /*serializable=*/true);
    if (!snap.ok()) return silent(snap.status());
    auto coord = ParseCoord(snap->ranges[0]);
    if (!coord || coord->number != epoch_.number) {
      log::Warning(
          "rendezvous: the coordinator of epoch {} is gone from etcd at {}, and this node's watch "
          "did not tell it (after {} s without a round); joining anew",
          epoch_.number, client_.Endpoint(), waited.count());
      return Probed::kGone;
    }
    if (said) return Probed::kThere;
    auto ttl = client_.LeaseTimeToLive(epoch_.lease);
    if (!ttl.ok()) return silent(ttl.status());
    // Alive (or within a second of its expiry), or revoked a moment ago.
    if (!*ttl || **ttl >= 0) return Probed::kThere;
    said = true;
    log::Warning(
        "rendezvous: no round for this node after {} s: the coordinator's lease in etcd (epoch {}) "
        "expired {} s ago, so its agent is likely gone, and etcd has not revoked it, which takes "
        "a commit; etcd at {} is likely stalled (its log: slow disk syncs, 'failed to revoke'); "
        "a survivor takes over once etcd revokes it",
        waited.count(), epoch_.number, -**ttl, client_.Endpoint());
    return Probed::kThere;
  }

  std::shared_ptr<Shared> s_;
  const Epoch epoch_;
  const std::string keys_;
  EtcdClient client_;
  const std::string local_address_;
  int64_t lease_ = 0;
  int64_t seq_ = 0;
  // The revision of this link's join, made while its coordinator was there
  // (0: none yet).
  int64_t floor_ = 0;
  // The link's watch and what it brought that nobody waited for yet.
  std::mutex watch_mu_;  // watch_'s creation against Abort()
  bool aborted_ = false;
  std::unique_ptr<EtcdClient> watch_;
  std::map<std::string, std::string> seen_;
};

// The coordinator of one epoch, hosted by this agent: the coordinator's
// rules on the loop, fed by a watcher thread (the run's keys, as etcd
// applies them) and answered by a writer thread (its writes, in order, and
// its lease's keep-alives). It ends when stopped or when its lease or watch
// fails; then `lost` runs on the loop.
class EtcdHost {
 public:
  EtcdHost(asio::io_context& io, std::shared_ptr<Shared> shared, Epoch epoch,
           std::function<void(const std::string&)> lost)
      : io_(io),
        s_(std::move(shared)),
        epoch_(epoch),
        keys_(s_->EpochPrefix(epoch.number)),
        lost_(std::move(lost)),
        watch_client_(s_->etcd),
        write_client_(s_->etcd) {
    CoordinatorOptions co;
    co.run_id = s_->o.run_id;
    co.min_nodes = s_->o.min_nodes;
    co.max_nodes = s_->o.max_nodes;
    co.max_restarts = s_->o.max_restarts;
    co.join_timeout = s_->o.join_timeout;
    co.last_call_timeout = s_->o.last_call_timeout;
    co.close_timeout = s_->o.close_timeout;
    co.heartbeat_timeout = Duration(0);  // the leases judge liveness
    co.host_id = s_->o.node_id;
    coordinator_ = std::make_unique<HostedCoordinator>(io_, co, [this](const Write& w) {
      std::lock_guard lk(mu_);
      writes_.push_back(w);
      cv_.notify_all();
    });
    watcher_ = std::thread([this] { WatchLoop(); });
    writer_ = std::thread([this] { WriteLoop(); });
  }

  ~EtcdHost() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    watch_client_.Abort();
    watcher_.join();
    writer_.join();
    // The threads are gone (they read alive_ to post): what they posted and
    // the loop has not run yet now finds this host gone.
    alive_.reset();
    // Giving up the lease deletes `coord` and everything written under it:
    // the nodes see the coordinator go at once.
    (void)write_client_.Revoke(epoch_.lease);
  }

  HostedCoordinator& coordinator() { return *coordinator_; }

 private:
  void WatchLoop() {
    const std::string coord = s_->coord_key;
    Status s = watch_client_.Watch(
        {{keys_, PrefixEnd(keys_)}, {coord, ""}}, epoch_.number, [&](const WatchEvent& e) {
          if (e.kv.key == coord) {
            // Its creation is where the watch starts; a deletion or a new
            // coordinator's key means this one is over.
            return !e.deleted && e.kv.create_revision == epoch_.number;
          }
          std::string key = e.kv.key.substr(keys_.size());
          if (key.starts_with(kJoin)) {
            auto heard = e.deleted ? joins_.OnDelete(key) : joins_.OnPut(key, e.kv.mod_revision);
            if (heard.gone) {
              OnLoop([this, seq = *heard.gone, lease_ended = e.deleted] {
                coordinator_->OnNodeGone(
                    seq, lease_ended ? "its etcd lease ended" : "its join was replaced");
              });
            }
            if (heard.joined) {
              OnLoop([this, key = fmt::format("node/{}", *heard.joined), value = e.kv.value] {
                coordinator_->OnKey(0, key, value);
              });
            }
          } else if (!e.deleted) {
            OnLoop([this, key, value = e.kv.value] { coordinator_->OnKey(0, key, value); });
          }
          return true;
        });
    if (Stopping()) return;
    Lost(s.ok() ? "its key in etcd was deleted or replaced" : s.message());
  }

  void WriteLoop() {
    auto next_keepalive = std::chrono::steady_clock::now();
    std::unique_lock lk(mu_);
    while (!stopping_) {
      cv_.wait_until(lk, next_keepalive, [&] { return stopping_ || !writes_.empty(); });
      if (stopping_) return;
      std::deque<Write> batch;
      batch.swap(writes_);
      lk.unlock();
      // Plain writes go in transactions of up to kMaxOps (a round of a
      // thousand nodes is a few commits, not a thousand), in order; a
      // create-if-absent goes alone. The lease is renewed between them, so
      // a long batch cannot let it expire.
      Status s = Status::OK();
      std::vector<std::pair<std::string, std::string>> puts;
      auto flush = [&] {
        if (s.ok() && !puts.empty()) s = write_client_.PutMany(puts, epoch_.lease);
        puts.clear();
      };
      auto keepalive = [&] {
        if (s.ok() && std::chrono::steady_clock::now() >= next_keepalive) {
          s = write_client_.KeepAlive(epoch_.lease);
          next_keepalive = std::chrono::steady_clock::now() + s_->o.heartbeat_interval;
        }
      };
      for (const auto& w : batch) {
        if (!s.ok()) break;
        if (w.if_absent) {
          flush();
          if (s.ok()) s = write_client_.PutIfAbsent(keys_ + w.key, w.value, epoch_.lease).status();
        } else {
          puts.emplace_back(keys_ + w.key, w.value);
          if (puts.size() == EtcdClient::kMaxOps) flush();
        }
        keepalive();
      }
      flush();
      keepalive();
      lk.lock();
      if (!s.ok() && !stopping_) {
        lk.unlock();
        Lost(s.message());
        return;
      }
    }
  }

  bool Stopping() {
    std::lock_guard lk(mu_);
    return stopping_;
  }

  // Runs `f` on the loop if this host still exists by then (the threads
  // post; the loop destroys).
  template <typename F>
  void OnLoop(F f) {
    asio::post(io_, [alive = std::weak_ptr<bool>(alive_), f = std::move(f)]() mutable {
      if (!alive.expired()) f();
    });
  }

  void Lost(const std::string& why) {
    OnLoop([lost = lost_, why] { lost(why); });
  }

  asio::io_context& io_;
  std::shared_ptr<Shared> s_;
  const Epoch epoch_;
  const std::string keys_;
  std::function<void(const std::string&)> lost_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // loop thread
  std::unique_ptr<HostedCoordinator> coordinator_;              // loop thread
  EtcdClient watch_client_;                                     // watcher thread
  JoinKeys joins_;                                              // watcher thread
  EtcdClient write_client_;  // writer thread, then the destructor

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Write> writes_;
  bool stopping_ = false;
  std::thread watcher_;
  std::thread writer_;
};

class EtcdMedium final : public Medium {
 public:
  EtcdMedium(asio::io_context& io, const Options& o) : io_(io), s_(std::make_shared<Shared>()) {
    s_->o = o;
    s_->etcd = o.etcd;
    // Every request but a watch answers within a heartbeat timeout, or the
    // node is as good as cut off.
    s_->etcd.timeout = o.heartbeat_timeout;
    s_->prefix = fmt::format("{}/trun/{}/", o.etcd_prefix, o.run_id);
    s_->coord_key = s_->prefix + "coord";
    // etcd looks for expired leases every 500 ms, so a lease of the timeout
    // less that (in whole seconds; etcd's minimum is 2 s) is found expired
    // within the heartbeat timeout.
    s_->ttl =
        std::chrono::seconds(std::max<int64_t>(2, (o.heartbeat_timeout.count() - 500) / 1000));
    s_->renew_after = std::chrono::duration_cast<Duration>(s_->ttl) / 2 - o.heartbeat_interval / 2;
  }

  Status Start() override {
    store::ServerOptions so;
    auto server = store::StoreServer::Start(io_, so);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    // Nobody's workers use it before a round names this node group rank 0.
    server_->SetAllowlist(AllowlistFor(s_->o.store_access, {}, ""));
    return Status::OK();
  }

  Result<std::unique_ptr<Link>> Connect(Clock::time_point deadline, Duration) override {
    {
      std::lock_guard lk(s_->mu);
      if (s_->known)
        return std::unique_ptr<Link>(std::make_unique<EtcdLink>(s_, *s_->known, s_->known_address));
    }
    EtcdClient client(s_->etcd);
    Duration backoff(50);
    while (true) {
      auto snap = client.Get({{s_->coord_key, ""}});
      Status s = snap.status();
      if (snap.ok()) {
        auto coord = ParseCoord(snap->ranges[0]);
        s_->Know(coord, client.LocalAddress());
        if (coord) {
          return std::unique_ptr<Link>(
              std::make_unique<EtcdLink>(s_, *coord, client.LocalAddress()));
        }
        s = Status::NotFound("no agent coordinates the rendezvous yet");
      }
      if (Clock::now() + backoff >= deadline) return s;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, Duration(1000));
    }
  }

  // Anyone may coordinate: etcd, not the coordinator's host, holds the
  // state that matters.
  bool MayTakeOver() const override { return true; }
  bool ElectedAtConnect() const override { return true; }

  bool TakeOver(const std::function<bool()>& stopping) override {
    EtcdClient client(s_->etcd);
    // Every node tries at its start: a read first, so that where somebody
    // coordinates already (all nodes but the first) the try costs no lease
    // and no raft commit. Of 1,000 nodes joining at once, the lease grant,
    // the failed create and the revoke were half of etcd's commits.
    auto current = client.Get({{s_->coord_key, ""}});
    // What a failed read knew is forgotten too: the links that follow must
    // reach etcd themselves, so a host cut off from it runs out of time.
    auto coord = current.ok() ? ParseCoord(current->ranges[0]) : std::nullopt;
    s_->Know(coord, client.LocalAddress());
    if (coord) return false;
    auto lease = client.GrantLease(s_->ttl);
    if (!lease.ok()) {
      log::Debug("rendezvous: cannot coordinate: {}", lease.status().message());
      return false;
    }
    json me = {{"id", s_->o.node_id}, {"lease", *lease}};
    auto created = client.PutIfAbsent(s_->coord_key, me.dump(), *lease);
    if (!created.ok() || !created->created) {
      (void)client.Revoke(*lease);
      return false;
    }
    Epoch epoch{created->kv.create_revision, *lease};
    s_->Know(epoch, client.LocalAddress());
    std::string endpoint = client.Endpoint();
    auto hosted = std::make_shared<std::promise<bool>>();
    asio::post(io_, [this, hosted, epoch, endpoint] {
      if (stopped_) {
        hosted->set_value(false);
        return;
      }
      // The host is destroyed on the loop, after which its `lost` never runs.
      host_ = std::make_unique<EtcdHost>(io_, s_, epoch, [this, epoch](const std::string& why) {
        log::Warning("rendezvous: no longer coordinating (epoch {}): {}", epoch.number, why);
        host_.reset();
      });
      log::Info("rendezvous: coordinating job '{}' through etcd at {} (epoch {})", s_->o.run_id,
                endpoint, epoch.number);
      hosted->set_value(true);
    });
    auto result = hosted->get_future();
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (stopping()) return false;
    }
    bool hosting = result.get();
    if (!hosting) (void)client.Revoke(*lease);
    return hosting;
  }

  std::string Where() const override {
    return fmt::format("the coordinator through etcd at {}", fmt::join(s_->etcd.endpoints, ","));
  }

  std::string NoTakeOverReason() const override {
    return fmt::format("etcd at {} does not answer from this host",
                       fmt::join(s_->etcd.endpoints, ","));
  }

  int WorkerStorePort() const override { return server_ ? server_->port() : 0; }

  // A worker of another node, still stopping, may write one more key after
  // this: that race is left, where the store-hosted coordinator has none.
  void ForgetWorkerKeys() override {
    if (server_) server_->ForgetLastRound(kTrunKeys);
  }

  // Group rank 0's agent hosts the round's workers' store, which serves
  // the round's hosts.
  bool WantsMembers(int group_rank) const override { return group_rank == 0; }

  void OnRound(const Round& round) override {
    if (server_) server_->SetAllowlist(AllowlistFor(s_->o.store_access, round.participants, ""));
  }

  void Linger(Duration limit, std::function<void()> then) override {
    if (!host_) return asio::post(io_, std::move(then));
    host_->coordinator().WhenSettled(limit, std::move(then));
  }

  void Stop() override {
    stopped_ = true;
    host_.reset();
    server_.reset();
  }

 private:
  asio::io_context& io_;
  std::shared_ptr<Shared> s_;
  bool stopped_ = false;                        // loop thread
  std::unique_ptr<store::StoreServer> server_;  // loop thread
  std::unique_ptr<EtcdHost> host_;              // loop thread
};

}  // namespace

JoinKeys::Heard JoinKeys::OnPut(const std::string& key, int64_t revision) {
  Heard h{std::nullopt, revision};
  auto [it, added] = seq_of_.try_emplace(key, revision);
  if (!added) {
    if (it->second == revision) return {};  // heard already
    h.gone = std::exchange(it->second, revision);
  }
  return h;
}

JoinKeys::Heard JoinKeys::OnDelete(const std::string& key) {
  auto it = seq_of_.find(key);
  if (it == seq_of_.end()) return {};
  Heard h{it->second, std::nullopt};
  seq_of_.erase(it);
  return h;
}

std::unique_ptr<Medium> MakeEtcdMedium(asio::io_context& io, const Options& options) {
  return std::make_unique<EtcdMedium>(io, options);
}

}  // namespace trun::rendezvous
