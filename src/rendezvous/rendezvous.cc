#include "rendezvous/rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <random>

#include "common/net.h"
#include "rendezvous/etcd_medium.h"
#include "rendezvous/participant.h"
#include "rendezvous/store_medium.h"
#include "store/server.h"

namespace trun::rendezvous {
namespace {

// One node: nothing to agree on. The agent still hosts the workers' store,
// and the restart budget is counted here, in rounds, as everywhere else.
class SingleNode final : public Rendezvous {
 public:
  SingleNode(asio::io_context& io, const launch::LaunchConfig& c) : io_(io), config_(c) {}

  Status Start(Handlers handlers) override {
    handlers_ = std::move(handlers);
    store::ServerOptions so;
    so.port = config_.master_port_given ? config_.master_port : 0;
    auto server = store::StoreServer::Start(io_, so);
    if (!server.ok()) {
      return Status::InvalidArgument(
          fmt::format("{}{}", server.status().message(),
                      config_.master_port_given
                          ? "; pick another --master-port, or leave it out to get a free one"
                          : ""));
    }
    server_ = std::move(*server);
    // trun's keys are the agent's alone here too (--standalone makes a
    // token of its own): no local process can reach them without it.
    if (!config_.rdzv.job_token.empty()) server_->RequireJobToken(config_.rdzv.job_token);
    Participant self{FqdnHostname(),
                     config_.rdzv_backend == "static" ? config_.master_addr
                                                      : config_.local_addr.value_or(FqdnHostname()),
                     config_.nproc_per_node};
    round_.participants = {self};
    // One node: its workers reach the store over loopback or this host's
    // own addresses, which every allowlist admits; nobody else needs it.
    server_->SetAllowlist(AllowlistFor(config_.rdzv.store_access, round_.participants, ""));
    round_.store_addr = self.addr;
    round_.store_port = server_->port();
    Deliver();
    return Status::OK();
  }

  void Failed(const std::string& reason) override {
    ++round_.failures;
    last_failure_ = reason;
  }

  void Ready() override {
    ++round_.number;
    // The last attempt's workers are gone; the next one's find no key of
    // theirs (StoreServer::EraseAllBut says why).
    server_->EraseAllBut(kTrunKeys);
    Deliver();
  }

  void Succeeded(std::function<void()> done) override { asio::post(io_, std::move(done)); }

  void Shutdown() override { server_.reset(); }

 private:
  void Deliver() {
    if (round_.failures > config_.max_restarts) {
      Status spent = Status::Internal(
          fmt::format("the restart budget is spent (--max-restarts {}); last failure: {}",
                      config_.max_restarts, last_failure_));
      asio::post(io_, [this, spent] { handlers_.round(spent); });
      return;
    }
    asio::post(io_, [this, r = round_] { handlers_.round(r); });
  }

  asio::io_context& io_;
  const launch::LaunchConfig& config_;
  Handlers handlers_;
  std::unique_ptr<store::StoreServer> server_;
  Round round_;
  std::string last_failure_;
};

}  // namespace

Options OptionsFromConfig(const launch::LaunchConfig& c) {
  Options o;
  static_cast<launch::RdzvSettings&>(o) = c.rdzv;
  o.backend = c.rdzv_backend == "etcd-v2" ? "etcd" : c.rdzv_backend;
  o.run_id = c.rdzv_id;
  std::mt19937 rng(std::random_device{}());
  o.node_id = fmt::format("{}_{}_{:04x}", FqdnHostname(), ::getpid(), rng() & 0xffff);
  // torch's static rendezvous waits for MAX nodes, whatever MIN says.
  o.min_nodes = c.rdzv_backend == "static" ? c.max_nodes : c.min_nodes;
  o.max_nodes = c.max_nodes;
  o.nproc = c.nproc_per_node;
  o.max_restarts = c.max_restarts;
  o.node_rank = c.node_rank;
  o.local_addr = c.local_addr.value_or("");
  o.linger = Duration(static_cast<int64_t>(c.shutdown_timeout_s * 1000)) + o.heartbeat_timeout;
  o.port_given = c.rdzv_backend == "static";
  return o;
}

Result<std::unique_ptr<Rendezvous>> Make(asio::io_context& io, const launch::LaunchConfig& c) {
  // A static node of rank 1 or more of a one-node job waits for a node 0
  // that hosts the store, as torch's does (launch/args.cc warned).
  if (c.max_nodes == 1 && c.node_rank == 0 && (c.rdzv_backend == "static" || c.standalone)) {
    return std::unique_ptr<Rendezvous>(std::make_unique<SingleNode>(io, c));
  }
  Options options = OptionsFromConfig(c);
  auto medium =
      options.backend == "etcd" ? MakeEtcdMedium(io, options) : MakeStoreMedium(io, options);
  return MakeParticipant(io, std::move(options), std::move(medium));
}

}  // namespace trun::rendezvous
