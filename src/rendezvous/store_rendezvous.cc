#include "rendezvous/store_rendezvous.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/net.h"
#include "common/strings.h"
#include "rendezvous/coordinator.h"
#include "store/client.h"
#include "store/server.h"

namespace trun::rendezvous {
namespace {

using json = nlohmann::json;
using store::StoreClient;

// A WAIT for the next round or the end of this one may last as long as the
// job does; the control thread's heartbeat is what notices a dead store.
constexpr Duration kForever = std::chrono::hours(24 * 365);

std::string MakeNodeId() {
  std::mt19937 rng(std::random_device{}());
  return fmt::format("{}_{}_{:04x}", FqdnHostname(), ::getpid(), rng() & 0xffff);
}

// A message from the node to the coordinator, sent by the control thread.
struct Request {
  int64_t seq;
  std::string key;
  std::string value;
  bool if_absent;
};

class StoreRendezvous final : public Rendezvous {
 public:
  StoreRendezvous(asio::io_context& io, Options o)
      : io_(io),
        o_(std::move(o)),
        id_(MakeNodeId()),
        prefix_(fmt::format("/trun/rdzv/{}/", o_.run_id)),
        timer_(io) {}
  ~StoreRendezvous() override { Shutdown(); }

  Status Start(Handlers handlers) override {
    handlers_ = std::move(handlers);
    if (o_.backend == "static") {
      if (o_.node_rank == 0) {
        Status s = Host();
        if (!s.ok()) {
          return Status::InvalidArgument(fmt::format(
              "{}; node rank 0 hosts the store on --master-port: pick a free port", s.message()));
        }
      }
    } else {
      bool is_host = o_.is_host.value_or(IsLocalAddress(o_.endpoint_host));
      if (is_host) {
        Status s = Host();
        if (!s.ok() && o_.is_host.value_or(false)) {
          return Status::InvalidArgument(
              fmt::format("{}; --rdzv-conf is_host=1 asks this node to host the store: free the "
                          "port or choose another in --rdzv-endpoint",
                          s.message()));
        }
        // Another agent on this host bound it first: it hosts, we join.
        if (!s.ok()) log::Debug("rendezvous: {}; joining as a client", s.message());
      }
    }
    if (o_.endpoint_port == 0) {
      return Status::InvalidArgument(
          fmt::format("--rdzv-endpoint {}:0: a free port can only be picked by the host of a "
                      "one-node job; give the port the other nodes use",
                      o_.endpoint_host));
    }
    want_round_ = true;
    main_ = std::thread([this] { MainLoop(); });
    control_ = std::thread([this] { ControlLoop(); });
    return Status::OK();
  }

  void Failed(const std::string& reason) override {
    std::lock_guard lk(mu_);
    if (!in_round_) return;
    requests_.push_back({seq_, fmt::format("end/{}", round_),
                         fmt::format("failure: {}: {}", id_, reason), /*if_absent=*/true});
    cv_.notify_all();
  }

  void Ready() override {
    std::lock_guard lk(mu_);
    want_round_ = true;
    cv_.notify_all();
  }

  void Succeeded(std::function<void()> done) override {
    std::lock_guard lk(mu_);
    on_done_ = std::move(done);
    succeeded_ = true;
    requests_.push_back({seq_, fmt::format("done/{}", seq_), std::to_string(round_), false});
    cv_.notify_all();
  }

  void Shutdown() override {
    if (shut_) return;
    shut_ = true;
    {
      std::lock_guard lk(mu_);
      if (seq_ != 0) requests_.push_back({seq_, fmt::format("left/{}", seq_), "1", false});
      stopping_ = true;
      if (main_client_) main_client_->Abort();
      cv_.notify_all();
    }
    if (control_.joinable()) control_.join();
    if (main_.joinable()) main_.join();
    timer_.cancel();
    coordinator_.reset();
    server_.reset();
  }

 private:
  // ---- hosting, on the loop ------------------------------------------------

  Status Host() {
    store::ServerOptions so;
    so.port = o_.endpoint_port;
    auto server = store::StoreServer::Start(io_, so);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    o_.endpoint_port = server_->port();
    CoordinatorOptions co;
    co.run_id = o_.run_id;
    co.min_nodes = o_.min_nodes;
    co.max_nodes = o_.max_nodes;
    co.by_node_rank = o_.backend == "static";
    co.max_restarts = o_.max_restarts;
    co.join_timeout = o_.join_timeout;
    co.last_call_timeout = o_.last_call_timeout;
    co.close_timeout = o_.close_timeout;
    co.heartbeat_timeout = o_.heartbeat_timeout;
    co.store_addr = o_.endpoint_host;
    co.store_port = o_.endpoint_port;
    co.host_id = id_;
    coordinator_ = std::make_unique<Coordinator>(co, Clock::now());
    server_->Observe(
        prefix_,
        [this](uint64_t conn, const std::string& key, const std::string& value) {
          if (!coordinator_) return;
          coordinator_->OnKey(conn, std::string_view(key).substr(prefix_.size()), value,
                              Clock::now());
          Apply();
        },
        [this](uint64_t conn) {
          if (!coordinator_) return;
          coordinator_->OnDisconnect(conn, Clock::now());
          Apply();
        });
    log::Info("rendezvous: hosting the store for job '{}' on port {}", o_.run_id, o_.endpoint_port);
    return Status::OK();
  }

  // Makes the coordinator's writes and sets the timer to its next deadline.
  void Apply() {
    for (auto& w : coordinator_->TakeWrites()) {
      if (w.if_absent) {
        (void)server_->CompareSet(prefix_ + w.key, "", std::move(w.value));
      } else {
        server_->Set(prefix_ + w.key, std::move(w.value));
      }
    }
    auto next = coordinator_->NextDeadline();
    if (next == armed_) return;
    armed_ = next;
    timer_.cancel();
    if (!next) return;
    timer_.expires_at(*next);
    timer_.async_wait([this](std::error_code ec) {
      if (ec || !coordinator_) return;
      armed_.reset();
      coordinator_->OnTimer(Clock::now());
      Apply();
    });
  }

  // From the main thread: try to become the store's host after its loss.
  bool TakeOver() {
    auto hosted = std::make_shared<std::promise<bool>>();
    asio::post(io_, [this, hosted] {
      if (shut_ || server_) {
        hosted->set_value(false);
        return;
      }
      Status s = Host();
      if (!s.ok()) log::Debug("rendezvous: no takeover: {}", s.message());
      hosted->set_value(s.ok());
    });
    // The loop may be shutting down, joining this very thread.
    auto result = hosted->get_future();
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (Stopping()) return false;
    }
    return result.get();
  }

  // ---- the main thread: join, rounds, their ends ---------------------------

  template <typename F>
  void Post(F f) {
    asio::post(io_, [this, f = std::move(f)]() mutable {
      if (!shut_) f();
    });
  }

  void PostError(Status s) {
    Post([this, s] { handlers_.round(s); });
  }

  bool Stopping() {
    std::lock_guard lk(mu_);
    return stopping_;
  }

  // Connects, giving up at the deadline or when the agent stops. After the
  // store was lost, an agent that owns the endpoint's address keeps trying
  // to bind it too (the dead host's port may take a moment to free up): the
  // first to bind hosts, the others connect to it.
  Result<StoreClient> Connect(Clock::time_point deadline, bool take_over) {
    while (true) {
      if (take_over && TakeOver()) {
        log::Warning("rendezvous: took over the store at {}:{}", o_.endpoint_host,
                     o_.endpoint_port);
        take_over = false;
      }
      auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
      auto c = StoreClient::Connect(o_.endpoint_host, o_.endpoint_port,
                                    std::clamp(left, Duration(1), Duration(take_over ? 200 : 1000)),
                                    kForever);
      if (c.ok() || Clock::now() >= deadline || Stopping()) return c;
    }
  }

  void MainLoop() {
    std::string lost_host;
    auto deadline = Clock::now() + o_.join_timeout;
    bool take_over = false;
    while (true) {
      auto client = Connect(deadline, take_over);
      if (Stopping()) return;
      if (!client.ok()) {
        if (lost_host.empty()) {
          PostError(Status::Timeout(fmt::format(
              "rendezvous: cannot reach the store at {}:{} within join_timeout: {}; is the host "
              "agent{} running, and is --rdzv-endpoint right?",
              o_.endpoint_host, o_.endpoint_port, client.status().message(),
              o_.backend == "static" ? " (node rank 0)" : "")));
        } else {
          PostError(Status::IOError(fmt::format(
              "rendezvous: lost the store at {}:{} hosted by {}, and no surviving node could "
              "take it over{}",
              o_.endpoint_host, o_.endpoint_port, lost_host,
              o_.backend == "static"
                  ? " (the static backend has one host: node rank 0)"
                  : ": only an agent on a host that owns that address can serve it")));
        }
        return;
      }
      {
        std::lock_guard lk(mu_);
        main_client_ = &*client;
        if (stopping_) return;
      }
      Status s = Participate(*client);
      {
        std::lock_guard lk(mu_);
        main_client_ = nullptr;
        seq_ = 0;
      }
      if (s.ok() || Stopping()) return;
      // The store is gone. Stop the workers, then find a new one.
      bool was_in_round;
      {
        std::lock_guard lk(mu_);
        was_in_round = in_round_;
        in_round_ = false;
        // A node that was running must stop its workers before it may be
        // put in a round again: the agent calls Ready() once they are.
        if (was_in_round) want_round_ = false;
        if (succeeded_) {
          // Our workers are done; the host went away after the barrier.
          auto done = on_done_;
          Post([done] { done(); });
          return;
        }
      }
      lost_host = last_host_.empty() ? fmt::format("{}:{}", o_.endpoint_host, o_.endpoint_port)
                                     : last_host_;
      log::Warning("rendezvous: lost the store at {}:{} ({}): {}", o_.endpoint_host,
                   o_.endpoint_port, lost_host, s.message());
      if (was_in_round) {
        std::string why = fmt::format("membership: lost the rendezvous store ({})", lost_host);
        Post([this, why] { handlers_.round_ended(why); });
      }
      take_over = o_.backend != "static" && IsLocalAddress(o_.endpoint_host);
      deadline = Clock::now() + o_.heartbeat_timeout + o_.heartbeat_interval;
    }
  }

  // One life on one store: join, then rounds until the job ends for this
  // node (OK) or the store fails (the error).
  Status Participate(StoreClient& c) {
    auto seq = c.Add(prefix_ + "seq", 1);
    if (!seq.ok()) return seq.status();
    if (addr_.empty()) addr_ = o_.local_addr.empty() ? c.LocalAddress() : o_.local_addr;
    json info = {{"id", id_},
                 {"addr", addr_},
                 {"nproc", o_.nproc},
                 {"node_rank", o_.node_rank},
                 {"round", known_round_},
                 {"failures", known_failures_},
                 {"prev", prev_ids_},
                 {"prev_host", last_host_id_}};
    TRUN_RETURN_IF_ERROR(c.Set(fmt::format("{}node/{}", prefix_, *seq), info.dump()));
    {
      std::lock_guard lk(mu_);
      seq_ = *seq;
      cv_.notify_all();
    }
    int64_t asked = 0;
    while (true) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || succeeded_ || want_round_; });
        if (stopping_) return Status::OK();
        if (succeeded_) {
          auto done = on_done_;
          Post([done] { done(); });
          return Status::OK();
        }
        ++asked;
      }
      TRUN_RETURN_IF_ERROR(c.Set(fmt::format("{}ready/{}", prefix_, *seq), std::to_string(asked)));
      std::string assign_key = fmt::format("{}assign/{}/{}", prefix_, *seq, asked);
      TRUN_RETURN_IF_ERROR(c.Wait({assign_key}, kForever));
      auto assign = c.Get(assign_key);
      if (!assign.ok()) return assign.status();
      if (assign->starts_with("error:")) {
        PostError(Status::Internal(assign->substr(6)));
        return Status::OK();
      }
      auto r = ParseInt(*assign);
      auto round_json = c.Get(fmt::format("{}round/{}", prefix_, r.value_or(-1)));
      if (!round_json.ok()) return round_json.status();
      auto round = ParseRound(*round_json);
      if (!round.ok()) {
        PostError(round.status());
        return Status::OK();
      }
      {
        std::lock_guard lk(mu_);
        round_ = round->number;
        in_round_ = true;
        want_round_ = false;
      }
      Post([this, rd = *round] { handlers_.round(rd); });
      std::string end_key = fmt::format("{}end/{}", prefix_, round->number);
      TRUN_RETURN_IF_ERROR(c.Wait({end_key}, kForever));
      auto reason = c.Get(end_key);
      if (!reason.ok()) return reason.status();
      {
        std::lock_guard lk(mu_);
        in_round_ = false;
        if (succeeded_) {
          auto done = on_done_;
          Post([done] { done(); });
          return Status::OK();
        }
      }
      Post([this, why = *reason] { handlers_.round_ended(why); });
    }
  }

  Result<Round> ParseRound(const std::string& text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array()) {
      return Status::Internal("rendezvous: a malformed round from the coordinator: " + text);
    }
    Round r;
    r.number = j.value("round", int64_t{0});
    r.failures = j.value("failures", int64_t{0});
    r.store_addr = j.value("store_addr", "");
    r.store_port = j.value("store_port", 0);
    r.group_rank = -1;
    prev_ids_.clear();
    for (const auto& n : j["nodes"]) {
      Participant p{n.value("id", ""), n.value("addr", ""), n.value("nproc", 0)};
      if (p.id == id_) r.group_rank = static_cast<int>(r.participants.size());
      prev_ids_.push_back(p.id);
      r.participants.push_back(std::move(p));
    }
    if (r.group_rank < 0) return Status::Internal("rendezvous: assigned a round without us");
    known_round_ = r.number;
    known_failures_ = r.failures;
    last_host_id_ = j.value("host", "");
    last_host_ = last_host_id_;
    return r;
  }

  // ---- the control thread: heartbeats and messages --------------------------

  void ControlLoop() {
    std::optional<StoreClient> c;
    auto last_ok = Clock::now();
    std::unique_lock lk(mu_);
    while (true) {
      cv_.wait_for(lk, o_.heartbeat_interval, [&] { return stopping_ || !requests_.empty(); });
      const int64_t seq = seq_;
      if (seq == 0) {
        // Not joined (or joining anew): what was asked of an old store is moot.
        std::erase_if(requests_, [](const Request& r) { return r.seq != 0; });
        if (stopping_) return;
        last_ok = Clock::now();
        continue;
      }
      std::deque<Request> batch;
      batch.swap(requests_);
      const bool stopping = stopping_;
      lk.unlock();
      Status s = Status::OK();
      if (!c) {
        auto made = StoreClient::Connect(o_.endpoint_host, o_.endpoint_port, o_.heartbeat_interval,
                                         o_.heartbeat_timeout);
        if (made.ok()) {
          c.emplace(std::move(*made));
        } else {
          s = made.status();
        }
      }
      for (auto& r : batch) {
        if (!s.ok()) break;
        if (r.seq != seq) continue;
        std::string key = r.key;
        if (r.if_absent) {
          s = c->CompareSet(prefix_ + key, "", r.value).status();
        } else {
          s = c->Set(prefix_ + key, r.value);
        }
      }
      if (s.ok() && !stopping) s = c->Add(fmt::format("{}hb/{}", prefix_, seq), 1).status();
      lk.lock();
      if (stopping) return;
      if (s.ok()) {
        last_ok = Clock::now();
        continue;
      }
      c.reset();
      if (Clock::now() - last_ok >= o_.heartbeat_timeout && main_client_) {
        // The store stopped answering (a host cut off from the network
        // keeps its connections open): wake the main thread to recover.
        log::Warning("rendezvous: the store at {}:{} has not answered for {} ms: {}",
                     o_.endpoint_host, o_.endpoint_port, o_.heartbeat_timeout.count(), s.message());
        main_client_->Abort();
        last_ok = Clock::now();
      }
    }
  }

  asio::io_context& io_;
  Options o_;
  const std::string id_;
  const std::string prefix_;
  Handlers handlers_;
  bool shut_ = false;  // loop thread only

  // Hosting (loop thread only).
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<Coordinator> coordinator_;
  asio::steady_timer timer_;
  std::optional<Clock::time_point> armed_;

  // The main thread's own.
  std::string addr_;
  int64_t known_round_ = -1;
  int64_t known_failures_ = 0;
  std::vector<std::string> prev_ids_;
  std::string last_host_id_;
  std::string last_host_;

  // Shared, under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t seq_ = 0;  // 0: not joined to the current store
  int64_t round_ = -1;
  bool in_round_ = false;
  // The agent has no workers running and waits for a round.
  bool want_round_ = false;
  bool succeeded_ = false;
  bool stopping_ = false;
  std::function<void()> on_done_;
  std::deque<Request> requests_;
  StoreClient* main_client_ = nullptr;

  std::thread main_;
  std::thread control_;
};

}  // namespace

std::unique_ptr<Rendezvous> MakeStoreRendezvous(asio::io_context& io, Options options) {
  return std::make_unique<StoreRendezvous>(io, std::move(options));
}

}  // namespace trun::rendezvous
