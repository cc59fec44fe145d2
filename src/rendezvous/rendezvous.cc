#include "rendezvous/rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <random>
#include <set>

#include "common/log.h"
#include "common/net.h"
#include "common/strings.h"
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
    auto access = ParseStoreAccess(config_.rdzv_configs);
    if (!access.ok()) return access.status();
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
    Participant self{FqdnHostname(),
                     config_.rdzv_backend == "static" ? config_.master_addr
                                                      : config_.local_addr.value_or(FqdnHostname()),
                     config_.nproc_per_node};
    round_.participants = {self};
    // One node: its workers reach the store over loopback or this host's
    // own addresses, which every allowlist admits; nobody else needs it.
    server_->SetAllowlist(AllowlistFor(*access, round_.participants, ""));
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

// "host", "host:port", "[v6]:port" -> host and port (or `default_port`).
Status SplitEndpoint(const std::string& endpoint, int default_port, std::string& host, int& port) {
  std::string rest = endpoint;
  std::string port_text;
  if (rest.starts_with("[")) {
    size_t close = rest.find(']');
    if (close == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("--rdzv-endpoint '{}': an IPv6 address needs its closing ']'", endpoint));
    }
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') {
        return Status::InvalidArgument(
            fmt::format("--rdzv-endpoint '{}': expected [address]:port", endpoint));
      }
      port_text = rest.substr(close + 2);
    }
  } else {
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find(':') == colon) {
      host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
    } else {
      host = rest;
    }
  }
  if (host.empty()) {
    return Status::InvalidArgument(fmt::format(
        "--rdzv-endpoint '{}': no host; give the host that runs the store, as HOST:PORT",
        endpoint));
  }
  port = default_port;
  if (!port_text.empty()) {
    auto p = ParseInt(port_text);
    if (!p || *p < 0 || *p > 65535) {
      return Status::InvalidArgument(fmt::format(
          "--rdzv-endpoint '{}': expected a port 0-65535, got '{}'", endpoint, port_text));
    }
    port = static_cast<int>(*p);
  }
  return Status::OK();
}

}  // namespace

Result<Options> OptionsFromConfig(const launch::LaunchConfig& c) {
  Options o;
  o.backend = c.rdzv_backend;
  o.run_id = c.rdzv_id;
  std::mt19937 rng(std::random_device{}());
  o.node_id = fmt::format("{}_{}_{:04x}", FqdnHostname(), ::getpid(), rng() & 0xffff);
  o.min_nodes = c.min_nodes;
  o.max_nodes = c.max_nodes;
  o.nproc = c.nproc_per_node;
  o.max_restarts = c.max_restarts;
  o.node_rank = c.node_rank;
  o.local_addr = c.local_addr.value_or("");
  const bool etcd = c.rdzv_backend == "etcd" || c.rdzv_backend == "etcd-v2";
  if (etcd) o.backend = "etcd";
  if (c.rdzv_backend == "static") {
    o.endpoint_host = c.master_addr;
    o.endpoint_port = c.master_port;
    o.port_given = true;
  } else if (etcd) {
    auto conf = [&](const char* key, const char* fallback) {
      auto it = c.rdzv_configs.find(key);
      return it == c.rdzv_configs.end() ? std::string(fallback) : it->second;
    };
    auto endpoints = EtcdEndpoints(c.rdzv_endpoint, conf("protocol", "http"));
    if (!endpoints.ok()) return endpoints.status();
    o.etcd.endpoints = std::move(*endpoints);
    o.etcd.cacert = conf("cacert", "");
    o.etcd.cert = conf("cert", "");
    o.etcd.key = conf("key", "");
    o.etcd_prefix = conf("etcd_prefix", "/torchelastic/p2p");
    while (o.etcd_prefix.ends_with('/')) o.etcd_prefix.pop_back();
  } else {
    TRUN_RETURN_IF_ERROR(SplitEndpoint(c.rdzv_endpoint.empty() ? "localhost" : c.rdzv_endpoint,
                                       29400, o.endpoint_host, o.endpoint_port));
  }

  std::vector<std::string> problems;
  auto seconds = [&](const std::string& key, Duration& out) {
    auto it = c.rdzv_configs.find(key);
    if (it == c.rdzv_configs.end()) return false;
    auto v = ParseDouble(it->second);
    if (!v || *v <= 0) {
      problems.push_back(fmt::format("--rdzv-conf {}={}: expected seconds > 0", key, it->second));
      return false;
    }
    out = Duration(static_cast<int64_t>(*v * 1000));
    return true;
  };
  // static's and etcd's "timeout" is their join timeout; torchrun puts 900
  // there.
  if (c.rdzv_backend != "c10d") seconds("timeout", o.join_timeout);
  seconds("join_timeout", o.join_timeout);
  seconds("last_call_timeout", o.last_call_timeout);
  seconds("close_timeout", o.close_timeout);
  // torch's keep-alive settings, then trun's own names for the same thing.
  Duration keep_alive = o.heartbeat_interval;
  if (seconds("keep_alive_interval", keep_alive)) {
    o.heartbeat_interval = keep_alive;
    o.heartbeat_timeout = keep_alive * 3;
  }
  if (auto it = c.rdzv_configs.find("keep_alive_max_attempt"); it != c.rdzv_configs.end()) {
    auto n = ParseInt(it->second);
    if (!n || *n < 1) {
      problems.push_back(fmt::format(
          "--rdzv-conf keep_alive_max_attempt={}: expected a whole number >= 1", it->second));
    } else {
      o.heartbeat_timeout = o.heartbeat_interval * *n;
    }
  }
  seconds("heartbeat_interval", o.heartbeat_interval);
  seconds("heartbeat_timeout", o.heartbeat_timeout);
  o.linger = Duration(static_cast<int64_t>(c.shutdown_timeout_s * 1000)) + o.heartbeat_timeout;
  if (o.heartbeat_timeout <= o.heartbeat_interval) {
    problems.push_back(
        fmt::format("--rdzv-conf: heartbeat_timeout ({} ms) must exceed heartbeat_interval ({} ms)",
                    o.heartbeat_timeout.count(), o.heartbeat_interval.count()));
  }
  if (auto it = c.rdzv_configs.find("is_host"); it != c.rdzv_configs.end()) {
    static const std::set<std::string> kTrue = {"1", "true", "t", "yes", "y"};
    static const std::set<std::string> kFalse = {"0", "false", "f", "no", "n"};
    std::string v = it->second;
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (kTrue.count(v)) {
      o.is_host = true;
    } else if (kFalse.count(v)) {
      o.is_host = false;
    } else {
      problems.push_back(fmt::format("--rdzv-conf is_host={}: expected true or false", it->second));
    }
  }
  if (auto access = ParseStoreAccess(c.rdzv_configs); access.ok()) {
    o.store_access = std::move(*access);
  } else {
    problems.push_back(access.status().message());
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "\n") + p;
    return Status::InvalidArgument(all);
  }
  return o;
}

Result<std::unique_ptr<Rendezvous>> Make(asio::io_context& io, const launch::LaunchConfig& c) {
  if (c.max_nodes == 1 && (c.rdzv_backend == "static" || c.standalone)) {
    return std::unique_ptr<Rendezvous>(std::make_unique<SingleNode>(io, c));
  }
  auto options = OptionsFromConfig(c);
  if (!options.ok()) return options.status();
  auto medium =
      options->backend == "etcd" ? MakeEtcdMedium(io, *options) : MakeStoreMedium(io, *options);
  return MakeParticipant(io, std::move(*options), std::move(medium));
}

}  // namespace trun::rendezvous
