#include "rendezvous/store_access.h"

#include <fmt/format.h>
#include <netdb.h>

#include <algorithm>

#include "common/log.h"
#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

Result<StoreAccess> ParseStoreAccess(const std::map<std::string, std::string>& rdzv_configs) {
  StoreAccess access;
  auto it = rdzv_configs.find("store_allow");
  if (it == rdzv_configs.end()) return access;
  std::string spec = it->second;
  std::replace(spec.begin(), spec.end(), ';', ',');
  auto networks = store::ParseNetworks(spec);
  if (!networks.ok()) {
    return Status::InvalidArgument(
        fmt::format("--rdzv-conf store_allow={}: {}; separate networks with ';'", it->second,
                    networks.status().message()));
  }
  access.any = !networks->has_value();
  if (networks->has_value()) access.extra = std::move(**networks);
  return access;
}

namespace {

void AddHost(const std::string& host, std::vector<store::Network>& out) {
  std::error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (!ec) {
    out.push_back({a, a.is_v4() ? 32 : 128});
    return;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    log::Warning(
        "rendezvous: cannot resolve {}, a host of the round: its workers cannot use the "
        "store",
        host);
    return;
  }
  for (addrinfo* r = res; r; r = r->ai_next) {
    if (r->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<const sockaddr_in*>(r->ai_addr);
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &sin->sin_addr, 4);
      out.push_back({asio::ip::address_v4(b), 32});
    } else if (r->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<const sockaddr_in6*>(r->ai_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &sin6->sin6_addr, 16);
      out.push_back({asio::ip::address_v6(b), 128});
    }
  }
  freeaddrinfo(res);
}

}  // namespace

std::optional<store::Allowlist> AllowlistFor(const StoreAccess& access,
                                             const std::vector<Participant>& members,
                                             std::string strangers_prefix) {
  if (access.any) return std::nullopt;
  store::Allowlist list;
  list.networks = access.extra;
  for (const auto& m : members) {
    if (!m.addr.empty()) AddHost(m.addr, list.networks);
  }
  list.strangers_prefix = std::move(strangers_prefix);
  list.widen_hint =
      "--rdzv-conf store_allow=any (or networks: store_allow=10.0.0.0/8;...) widens it";
  return list;
}

}  // namespace trun::rendezvous
