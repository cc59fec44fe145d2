#include "rendezvous/rendezvous.h"

#include <fmt/format.h>

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
  SingleNode(asio::io_context& io, Options options)
      : io_(io), options_(std::move(options)), alone_(*options_.single_node) {}

  Status Start(Handlers handlers) override {
    handlers_ = std::move(handlers);
    store::ServerOptions so;
    so.port = alone_.port;
    auto server = store::StoreServer::Start(io_, so);
    if (!server.ok()) {
      return Status::InvalidArgument(fmt::format(
          "{}{}", server.status().message(),
          alone_.port != 0 ? "; pick another --master-port, or leave it out to get a free one"
                           : ""));
    }
    server_ = std::move(*server);
    // trun's keys are the agent's alone here too (--standalone makes a
    // token of its own): no local process can reach them without it.
    if (!options_.job_token.empty()) server_->RequireJobToken(options_.job_token);
    Participant self{FqdnHostname(), alone_.addr, options_.nproc};
    round_.participants = {self};
    round_.nodes = 1;
    round_.world_size = options_.nproc;
    round_.addr = self.addr;
    // One node: its workers reach the store over loopback or this host's
    // own addresses, which every allowlist admits; nobody else needs it.
    server_->SetAllowlist(AllowlistFor(options_.store_access, round_.participants, ""));
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
    // theirs (StoreServer::ForgetLastRound says why).
    server_->ForgetLastRound(kTrunKeys);
    Deliver();
  }

  void Succeeded(std::function<void()> done) override { asio::post(io_, std::move(done)); }

  void Shutdown() override { server_.reset(); }

 private:
  void Deliver() {
    if (round_.failures > options_.max_restarts) {
      NoRound spent{NoRound::Kind::kBudgetSpent,
                    Status::Internal(fmt::format(
                        "the restart budget is spent (--max-restarts {}); last failure: {}",
                        options_.max_restarts, last_failure_))};
      asio::post(io_, [this, spent] { handlers_.round(spent); });
      return;
    }
    asio::post(io_, [this, r = round_] { handlers_.round(r); });
  }

  asio::io_context& io_;
  const Options options_;
  const Options::SingleNode alone_;
  Handlers handlers_;
  std::unique_ptr<store::StoreServer> server_;
  Round round_;
  std::string last_failure_;
};

}  // namespace

RoundEnd RoundEnd::FromWire(std::string reason) {
  // The prefixes docs/rendezvous.md gives `end/<r>`: the coordinator's
  // "membership: ..." and a participant's "failure: <node>: ...".
  Cause cause = reason.starts_with("membership:") ? Cause::kMembership
                : reason.starts_with("failure:")  ? Cause::kPeerFailure
                                                  : Cause::kOther;
  return {cause, std::move(reason)};
}

std::string_view CauseName(RoundEnd::Cause cause) {
  switch (cause) {
    case RoundEnd::Cause::kMembership:
      return "membership";
    case RoundEnd::Cause::kPeerFailure:
      return "peer_failure";
    case RoundEnd::Cause::kOther:
      break;
  }
  return "round_ended";
}

Result<std::unique_ptr<Rendezvous>> Make(asio::io_context& io, Options options) {
  if (options.single_node) {
    return std::unique_ptr<Rendezvous>(std::make_unique<SingleNode>(io, std::move(options)));
  }
  auto medium =
      options.backend == "etcd" ? MakeEtcdMedium(io, options) : MakeStoreMedium(io, options);
  return MakeParticipant(io, std::move(options), std::move(medium));
}

}  // namespace trun::rendezvous
