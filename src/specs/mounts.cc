#include "specs/mounts.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "common/problems.h"
#include "common/strings.h"

namespace trun::specs {
namespace {

// Each accepted key and the option it sets.
const std::map<std::string, std::string>& KeyAliases() {
  static const std::map<std::string, std::string> kAliases = {
      {"type", "type"},         {"src", "src"},
      {"source", "src"},        {"dst", "dst"},
      {"destination", "dst"},   {"target", "dst"},
      {"readonly", "readonly"}, {"read_only", "readonly"},
      {"perm", "perm"},
  };
  return kAliases;
}

}  // namespace

Result<std::vector<Mount>> ParseMounts(const std::vector<std::string>& options) {
  Problems p;
  std::vector<std::map<std::string, std::string>> groups;
  std::vector<std::string> keys;
  for (const auto& [k, v] : KeyAliases()) keys.push_back(k);
  for (const auto& opt : options) {
    size_t eq = opt.find('=');
    std::string key = opt.substr(0, eq);
    std::string val = eq == std::string::npos ? "" : opt.substr(eq + 1);
    auto it = KeyAliases().find(key);
    if (it == KeyAliases().end()) {
      std::string guess = ClosestMatch(key, keys);
      p.Add(
          fmt::format("mounts: unknown option '{}'{}; the options are type, src, dst, readonly, "
                      "perm (e.g. type=bind,src=/host,dst=/job,readonly)",
                      key, guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
      continue;
    }
    if (it->second == "type") {
      groups.emplace_back();
    } else if (groups.empty()) {
      p.Add(fmt::format("mounts: '{}' comes before any type=; each mount starts with type=", opt));
      continue;
    }
    groups.back()[it->second] = val;
  }
  std::vector<Mount> mounts;
  for (const auto& g : groups) {
    const std::string& type = g.at("type");
    Mount m;
    auto src = g.find("src");
    auto dst = g.find("dst");
    if (type == "bind" || type == "volume") {
      m.type = type == "bind" ? MountType::kBind : MountType::kVolume;
      if (src == g.end() || dst == g.end()) {
        p.Add(fmt::format("mounts: a {} mount needs src= and dst=", type));
        continue;
      }
      m.src = src->second;
      if (m.type == MountType::kBind && !m.src.empty() && m.src[0] == '~') {
        const char* home = std::getenv("HOME");
        if (home && (m.src.size() == 1 || m.src[1] == '/')) m.src = home + m.src.substr(1);
      }
      m.dst = dst->second;
      m.read_only = g.count("readonly") > 0;
    } else if (type == "device") {
      m.type = MountType::kDevice;
      if (src == g.end()) {
        p.Add("mounts: a device mount needs src=");
        continue;
      }
      m.src = src->second;
      m.dst = dst == g.end() ? m.src : dst->second;
      auto perm = g.find("perm");
      if (perm != g.end()) m.permissions = perm->second;
      if (m.permissions.find_first_not_of("rwm") != std::string::npos) {
        p.Add(fmt::format("mounts: perm '{}' may only use the letters r, w, m", m.permissions));
        continue;
      }
    } else {
      p.Add(fmt::format("mounts: invalid mount type '{}', must be one of bind, volume, device",
                        type));
      continue;
    }
    mounts.push_back(std::move(m));
  }
  if (!p.empty()) return p.ToStatus();
  return mounts;
}

std::string FormatMount(const Mount& m) {
  std::string s = fmt::format("type={},src={},dst={}", MountTypeName(m.type), m.src, m.dst);
  if (m.type == MountType::kDevice) {
    s += ",perm=" + m.permissions;
  } else if (m.read_only) {
    s += ",readonly";
  }
  return s;
}

}  // namespace trun::specs
