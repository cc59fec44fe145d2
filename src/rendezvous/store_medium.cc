#include "rendezvous/store_medium.h"

#include <future>

#include "common/log.h"
#include "common/net.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/hosted_coordinator.h"
#include "rendezvous/store_access.h"
#include "store/client.h"
#include "store/server.h"

namespace trun::rendezvous {
namespace {

using store::StoreClient;

constexpr Duration kAuthTimeout = std::chrono::seconds(30);

class StoreLink final : public Link {
 public:
  StoreLink(StoreClient client, std::string prefix)
      : client_(std::move(client)), prefix_(std::move(prefix)) {}

  Result<int64_t> Join(const std::string& info) override {
    auto seq = client_.Add(prefix_ + "seq", 1);
    if (!seq.ok()) return seq.status();
    TRUN_RETURN_IF_ERROR(client_.Set(fmt::format("{}node/{}", prefix_, *seq), info));
    return *seq;
  }
  Status Put(const std::string& key, const std::string& value) override {
    return client_.Set(prefix_ + key, value);
  }
  Status PutIfAbsent(const std::string& key, const std::string& value) override {
    return client_.CompareSet(prefix_ + key, "", value).status();
  }
  Result<std::string> Await(const std::string& key) override {
    return client_.WaitAndGet(prefix_ + key, kNoOpTimeout);
  }
  Status Heartbeat(int64_t seq) override {
    return client_.Add(fmt::format("{}hb/{}", prefix_, seq), 1).status();
  }
  void Abort() override { client_.Abort(); }
  std::string LocalAddress() const override { return client_.LocalAddress(); }

 private:
  StoreClient client_;
  std::string prefix_;
};

class StoreMedium final : public Medium {
 public:
  StoreMedium(asio::io_context& io, const Options& o)
      : io_(io), o_(o), prefix_(fmt::format("{}rdzv/{}/", kTrunKeys, o.run_id)) {}

  Status Start() override {
    if (o_.backend == "static") {
      if (o_.node_rank == 0) {
        Status s = Host();
        if (!s.ok()) {
          return Status::InvalidArgument(fmt::format(
              "{}; node rank 0 hosts the store on --master-port: pick a free port", s.message()));
        }
      }
    } else if (o_.is_host.value_or(IsLocalAddress(o_.endpoint_host))) {
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
    if (o_.endpoint_port == 0) {
      return Status::InvalidArgument(
          fmt::format("--rdzv-endpoint {}:0: a free port can only be picked by the host of a "
                      "one-node job; give the port the other nodes use",
                      o_.endpoint_host));
    }
    return Status::OK();
  }

  Result<std::unique_ptr<Link>> Connect(Clock::time_point deadline, Duration op_timeout) override {
    auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    // The job token's exchange is bounded whatever op_timeout is: a process
    // on the port that accepts and never answers is no store to wait for.
    auto c = StoreClient::Connect(o_.endpoint_host, o_.endpoint_port, std::max(left, Duration(1)),
                                  std::min(op_timeout, kAuthTimeout));
    if (!c.ok()) {
      // Something on the port that is no store at all (client.h).
      if (c.status().code() == StatusCode::kPermissionDenied && !o_.job_token.empty()) {
        return Status::PermissionDenied(
            fmt::format("{} does not know the job token: {}", Where(), c.status().message()));
      }
      return c.status();
    }
    TRUN_RETURN_IF_ERROR(store::ShowJobToken(*c, o_.job_token, Where()));
    c->SetTimeout(op_timeout);
    return std::unique_ptr<Link>(std::make_unique<StoreLink>(std::move(*c), prefix_));
  }

  bool MayTakeOver() const override {
    return o_.backend != "static" && IsLocalAddress(o_.endpoint_host);
  }

  bool TakeOver(const std::function<bool()>& stopping) override {
    auto hosted = std::make_shared<std::promise<bool>>();
    asio::post(io_, [this, hosted] {
      if (stopped_ || server_) {
        hosted->set_value(false);
        return;
      }
      Status s = Host();
      if (!s.ok()) log::Debug("rendezvous: no takeover: {}", s.message());
      hosted->set_value(s.ok());
    });
    // The loop may be shutting down, joining the calling thread.
    auto result = hosted->get_future();
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (stopping()) return false;
    }
    return result.get();
  }

  std::string Where() const override {
    return fmt::format("the store at {}:{}", o_.endpoint_host, o_.endpoint_port);
  }

  std::string NoTakeOverReason() const override {
    return o_.backend == "static" ? "the static backend has one host, node rank 0"
                                  : "only an agent on a host that owns that address can serve it";
  }

  void Linger(Duration limit, std::function<void()> then) override {
    if (!coordinator_) return asio::post(io_, std::move(then));
    coordinator_->WhenSettled(limit, std::move(then));
  }

  void Stop() override {
    stopped_ = true;
    coordinator_.reset();
    server_.reset();
  }

 private:
  // On the loop: the store and the coordinator beside it.
  Status Host() {
    store::ServerOptions so;
    so.port = o_.endpoint_port;
    auto server = store::StoreServer::Start(io_, so);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    o_.endpoint_port = server_->port();
    // Without a token every agent has warned already (launch/args.cc).
    if (!o_.job_token.empty()) server_->RequireJobToken(o_.job_token);
    // Until a round closes nobody is a member: agents that join reach
    // only the rendezvous's keys (docs/rendezvous.md, "Who may use the
    // store").
    server_->SetAllowlist(AllowlistFor(o_.store_access, {}, prefix_));
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
    co.host_id = o_.node_id;
    co.peer_of = [this](uint64_t conn) {
      auto a = server_ ? server_->PeerOf(conn) : std::nullopt;
      return a ? a->to_string() : std::string();
    };
    coordinator_ = std::make_unique<HostedCoordinator>(io_, co, [this](const Write& w) {
      // A round closes: every worker of the last one is gone (each node
      // stopped its own before it joined), and none of the new one has
      // started, as no node knows of the round yet. The workers' keys go.
      if (w.key.starts_with("round/")) {
        server_->ForgetLastRound(kTrunKeys);
        // The store now serves the new round's hosts, and nobody else
        // beyond the rendezvous's keys: a host that left loses access.
        // Where agents prove the job token, a host is where its agent's
        // proven connection came from, never the address it names (which
        // any process could name); without a token nothing is proven, and
        // the named address serves as well as any.
        if (auto doc = DecodeRound(w.value); doc.ok()) {
          if (!o_.job_token.empty()) {
            for (size_t i = 0; i < doc->nodes.size(); ++i) {
              doc->nodes[i].addr = i < w.seen_from.size() ? w.seen_from[i] : "";
            }
          }
          server_->SetAllowlist(AllowlistFor(o_.store_access, doc->nodes, prefix_));
        }
      }
      if (w.if_absent) {
        (void)server_->CompareSet(prefix_ + w.key, "", w.value);
      } else {
        server_->Set(prefix_ + w.key, w.value);
      }
    });
    server_->Observe(
        prefix_,
        [this](uint64_t conn, const std::string& key, const std::string& value) {
          if (coordinator_)
            coordinator_->OnKey(conn, std::string_view(key).substr(prefix_.size()), value);
        },
        [this](uint64_t conn) {
          if (coordinator_) coordinator_->OnDisconnect(conn);
        });
    log::Info("rendezvous: hosting the store for job '{}' on port {}", o_.run_id, o_.endpoint_port);
    return Status::OK();
  }

  asio::io_context& io_;
  Options o_;
  const std::string prefix_;
  bool stopped_ = false;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<HostedCoordinator> coordinator_;
};

}  // namespace

std::unique_ptr<Medium> MakeStoreMedium(asio::io_context& io, const Options& options) {
  return std::make_unique<StoreMedium>(io, options);
}

}  // namespace trun::rendezvous
