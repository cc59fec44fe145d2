#include "store/allowlist.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "common/net.h"
#include "common/strings.h"

namespace trun::store {

bool Network::Contains(const asio::ip::address& a) const {
  auto x = Unmapped(a);
  auto n = Unmapped(address);
  if (x.is_v4() != n.is_v4()) return false;
  auto bytes_of = [](const asio::ip::address& ad) {
    std::array<unsigned char, 16> b{};
    if (ad.is_v4()) {
      auto v = ad.to_v4().to_bytes();
      std::copy(v.begin(), v.end(), b.begin());
    } else {
      b = ad.to_v6().to_bytes();
    }
    return b;
  };
  auto xb = bytes_of(x), nb = bytes_of(n);
  int bits = prefix_length;
  for (size_t i = 0; bits > 0 && i < xb.size(); ++i, bits -= 8) {
    unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;
    if ((xb[i] & mask) != (nb[i] & mask)) return false;
  }
  return true;
}

Result<std::optional<std::vector<Network>>> ParseNetworks(const std::string& spec) {
  if (Trim(spec) == "any") return std::optional<std::vector<Network>>();
  std::vector<Network> out;
  for (auto& item : Split(spec, ',')) {
    std::string part(Trim(item));
    if (part.empty()) continue;
    std::string addr = part;
    int len = -1;  // none given: one address
    if (auto slash = part.find('/'); slash != std::string::npos) {
      addr = part.substr(0, slash);
      auto n = ParseInt(part.substr(slash + 1));
      if (!n) {
        return Status::InvalidArgument(
            fmt::format("'{}' is not an address or CIDR (a.b.c.d/N, v6::/N) or 'any'", part));
      }
      len = *n < 0 ? 1000 : static_cast<int>(std::min<long long>(*n, 1000));
    }
    std::error_code ec;
    auto a = asio::ip::make_address(addr, ec);
    const int max = !ec && a.is_v4() ? 32 : 128;
    if (ec || len > max) {
      return Status::InvalidArgument(
          fmt::format("'{}' is not an address or CIDR (a.b.c.d/N, v6::/N) or 'any'", part));
    }
    out.push_back({a, len == -1 ? max : len});
  }
  return std::optional<std::vector<Network>>(std::move(out));
}

void Members::Set(std::optional<Allowlist> allowlist) {
  allow_ = std::move(allowlist);
  local_cache_.clear();
}

bool Members::Contains(const asio::ip::address& a) {
  if (!allow_) return true;
  for (const auto& n : allow_->networks) {
    if (n.Contains(a)) return true;
  }
  if (!allow_->local_always) return false;
  if (a.is_loopback()) return true;
  // This host's own addresses (a worker here that reached the store
  // through MASTER_ADDR's non-loopback address).
  auto [it, fresh] = local_cache_.try_emplace(a.to_string(), false);
  if (fresh) it->second = IsLocalAddress(it->first);
  return it->second;
}

}  // namespace trun::store
