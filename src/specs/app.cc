#include "specs/app.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <regex>
#include <set>

#include "common/problems.h"

namespace trun::specs {
namespace {

constexpr std::pair<AppState, std::string_view> kStateNames[] = {
    {AppState::kUnsubmitted, "UNSUBMITTED"}, {AppState::kSubmitted, "SUBMITTED"},
    {AppState::kPending, "PENDING"},         {AppState::kRunning, "RUNNING"},
    {AppState::kSucceeded, "SUCCEEDED"},     {AppState::kFailed, "FAILED"},
    {AppState::kCancelled, "CANCELLED"},     {AppState::kUnknown, "UNKNOWN"},
};

constexpr std::pair<RetryPolicy, std::string_view> kPolicyNames[] = {
    {RetryPolicy::kReplica, "REPLICA"},
    {RetryPolicy::kApplication, "APPLICATION"},
    {RetryPolicy::kRole, "ROLE"},
};

bool ValidEnvName(const std::string& k) {
  return !k.empty() && k.find('=') == std::string::npos && k.find('\0') == std::string::npos;
}

void ValidateRole(const Role& r, const std::string& where, Problems& p) {
  if (r.name.empty()) p.Add(where + ": the role has no name");
  if (r.entrypoint.empty() || r.entrypoint == kMissing) {
    p.Add(where + ": no entrypoint (the program each replica runs)");
  }
  if (r.num_replicas <= 0) {
    p.Add(fmt::format("{}: num_replicas must be at least 1, got {}", where, r.num_replicas));
  }
  if (r.min_replicas && (*r.min_replicas < 0 || *r.min_replicas > r.num_replicas)) {
    p.Add(fmt::format("{}: min_replicas must be between 0 and num_replicas ({}), got {}", where,
                      r.num_replicas, *r.min_replicas));
  }
  if (r.max_retries < 0) {
    p.Add(fmt::format("{}: max_retries must be 0 or more, got {}", where, r.max_retries));
  }
  if (!r.resource.IsNull()) {
    const std::pair<const char*, int> fields[] = {
        {"cpu", r.resource.cpu}, {"gpu", r.resource.gpu}, {"memMB", r.resource.mem_mb}};
    for (const auto& [name, v] : fields) {
      if (v < 0) p.Add(fmt::format("{}: resource.{} must be 0 or more, got {}", where, name, v));
    }
  }
  for (const auto& [dev, n] : r.resource.devices) {
    if (n < 0)
      p.Add(fmt::format("{}: resource.devices[{}] must be 0 or more, got {}", where, dev, n));
  }
  for (const auto& [name, port] : r.port_map) {
    if (port < 0 || port > 65535) {
      p.Add(fmt::format("{}: port_map[{}] must be a port 0-65535, got {}", where, name, port));
    }
  }
  for (const auto& [k, v] : r.env) {
    if (!ValidEnvName(k)) p.Add(fmt::format("{}: env has an invalid name '{}'", where, k));
  }
  for (size_t i = 0; i < r.mounts.size(); ++i) {
    const Mount& m = r.mounts[i];
    std::string at = fmt::format("{}: mounts[{}]", where, i);
    if (m.src.empty()) p.Add(at + ": no source");
    if (m.dst.empty()) p.Add(at + ": no destination");
    if (m.type == MountType::kDevice &&
        m.permissions.find_first_not_of("rwm") != std::string::npos) {
      p.Add(
          fmt::format("{}: permissions '{}' may only use the letters r, w, m", at, m.permissions));
    }
  }
}

// TorchX wraps a replica's error message at spaces once a line has `width`
// characters, indenting continuation lines to the header's width.
std::string WrapErrorMessage(std::string msg, std::string header, size_t width = 80) {
  static const std::regex kRpc(R"(\w*\('On WorkerInfo\(.+\):\n(.*\n)*'\))");
  static const std::regex kEmbedded(R"((.+)\nException.*)");
  std::smatch m;
  if (std::regex_search(msg, m, kRpc)) msg = m.str(0);
  if (std::regex_search(msg, m, kEmbedded)) msg = m.str(1);
  std::string out;
  size_t length = 0;
  for (size_t i = 0; i <= msg.size(); ++i) {
    if (i == msg.size() || (msg[i] == ' ' && length >= width)) {
      if (!out.empty()) out += '\n';
      out += header + msg.substr(i - length, length);
      header.assign(header.size(), ' ');
      length = 0;
    }
    ++length;
  }
  return out;
}

std::string FormatReplica(const ReplicaStatus& r) {
  std::string data;
  std::string state(AppStateName(r.state));
  nlohmann::json err;
  bool parsed = false;
  if (r.structured_error_msg != kNone) {
    err = nlohmann::json::parse(r.structured_error_msg, nullptr, false);
    parsed = !err.is_discarded() && err.is_object();
  }
  if (r.structured_error_msg != kNone && !parsed) {
    data = r.structured_error_msg;
  } else if (parsed) {
    // Two shapes: torch's error file nests the error under "message";
    // flat records carry message, errorCode and timestamp at the top.
    const nlohmann::json* msg = err.contains("message") ? &err["message"] : nullptr;
    std::string text;
    nlohmann::json timestamp, exitcode;
    if (msg && msg->is_object() && msg->contains("message") && (*msg)["message"].is_string()) {
      text = (*msg)["message"].get<std::string>();
      if (msg->contains("extraInfo") && (*msg)["extraInfo"].is_object()) {
        timestamp = (*msg)["extraInfo"].value("timestamp", nlohmann::json());
      }
      exitcode = msg->value("errorCode", nlohmann::json());
    } else if (msg && msg->is_string()) {
      text = msg->get<std::string>();
      timestamp = err.value("timestamp", nlohmann::json());
      exitcode = err.value("errorCode", nlohmann::json());
    } else {
      data = r.structured_error_msg;
    }
    if (data.empty()) {
      std::string ts = "<N/A>";
      long long seconds = 0;
      bool have_ts = false;
      if (timestamp.is_number_integer()) {
        seconds = timestamp.get<long long>();
        have_ts = true;
      } else if (timestamp.is_string()) {
        try {
          seconds = std::stoll(timestamp.get<std::string>());
          have_ts = true;
        } catch (const std::exception&) {
        }
      }
      if (have_ts) {
        std::time_t t = static_cast<std::time_t>(seconds);
        std::tm tm{};
        localtime_r(&t, &tm);
        ts = fmt::format("{:%Y-%m-%d %H:%M:%S}", tm);
      }
      std::string code = "<N/A>";
      if (exitcode.is_number_integer() && exitcode.get<long long>() != 0) {
        code = std::to_string(exitcode.get<long long>());
      } else if (exitcode.is_string() && !exitcode.get<std::string>().empty()) {
        code = exitcode.get<std::string>();
      }
      data = fmt::format("{} (exitcode: {})\n        timestamp: {}\n        hostname: {}\n    {}",
                         state, code, ts, r.hostname, WrapErrorMessage(text, "    error_msg: "));
    }
  } else {
    data = state;
    if (r.state == AppState::kCancelled || r.state == AppState::kFailed) data += " (no reply file)";
  }
  return fmt::format("\n {}{}[{}]:{}", r.id == 0 ? "*" : " ", r.role, r.id, data);
}

bool Selected(const std::string& role, const std::vector<std::string>& filter) {
  if (filter.empty()) return true;
  for (const auto& f : filter) {
    if (f == role) return true;
  }
  return false;
}

}  // namespace

std::string_view RetryPolicyName(RetryPolicy p) {
  for (const auto& [v, name] : kPolicyNames) {
    if (v == p) return name;
  }
  return "APPLICATION";
}

std::optional<RetryPolicy> ParseRetryPolicy(std::string_view name) {
  for (const auto& [v, n] : kPolicyNames) {
    if (n == name) return v;
  }
  return std::nullopt;
}

std::string_view MountTypeName(MountType t) {
  switch (t) {
    case MountType::kBind:
      return "bind";
    case MountType::kVolume:
      return "volume";
    case MountType::kDevice:
      return "device";
  }
  return "bind";
}

Status Validate(const AppDef& app) {
  Problems p;
  if (app.name.empty()) p.Add("the app has no name");
  if (app.roles.empty()) p.Add("the app has no roles");
  std::set<std::string> seen;
  for (size_t i = 0; i < app.roles.size(); ++i) {
    const Role& r = app.roles[i];
    std::string where =
        r.name.empty() ? fmt::format("roles[{}]", i) : fmt::format("roles[{}] ('{}')", i, r.name);
    if (!r.name.empty() && !seen.insert(r.name).second) {
      p.Add(fmt::format("{}: another role has the same name", where));
    }
    ValidateRole(r, where, p);
  }
  return p.ToStatus();
}

std::string_view AppStateName(AppState s) {
  for (const auto& [v, name] : kStateNames) {
    if (v == s) return name;
  }
  return "UNKNOWN";
}

std::optional<AppState> ParseAppState(std::string_view name) {
  for (const auto& [v, n] : kStateNames) {
    if (n == name) return v;
  }
  return std::nullopt;
}

bool RunsTrunsAgent(const Role& role) {
  auto it = role.metadata.find(kJobTokenRoleKey);
  return it != role.metadata.end() && *it == true;
}

bool IsTerminal(AppState s) {
  return s == AppState::kSucceeded || s == AppState::kFailed || s == AppState::kCancelled;
}

bool IsStarted(AppState s) { return IsTerminal(s) || s == AppState::kRunning; }

nlohmann::ordered_json AppStatus::ToJson(const std::vector<std::string>& filter) const {
  nlohmann::ordered_json j;
  j["state"] = std::string(AppStateName(state));
  j["num_restarts"] = num_restarts;
  j["roles"] = nlohmann::ordered_json::array();
  for (const auto& rs : roles) {
    if (!Selected(rs.role, filter)) continue;
    nlohmann::ordered_json role;
    role["role"] = rs.role;
    role["replicas"] = nlohmann::ordered_json::array();
    for (const auto& r : rs.replicas) {
      // TorchX serializes a replica's state as the enum's number.
      role["replicas"].push_back({{"id", r.id},
                                  {"state", static_cast<int>(r.state)},
                                  {"role", r.role},
                                  {"hostname", r.hostname},
                                  {"structured_error_msg", r.structured_error_msg},
                                  {"hostaddr", r.hostaddr.empty() ? r.hostname : r.hostaddr}});
    }
    j["roles"].push_back(std::move(role));
  }
  j["msg"] = msg;
  j["structured_error_msg"] = structured_error_msg;
  j["url"] = ui_url ? nlohmann::ordered_json(*ui_url) : nlohmann::ordered_json();
  return j;
}

std::string AppStatus::Format(const std::vector<std::string>& filter) const {
  std::string roles_data;
  for (const auto& rs : roles) {
    if (!Selected(rs.role, filter)) continue;
    std::vector<const ReplicaStatus*> sorted;
    for (const auto& r : rs.replicas) sorted.push_back(&r);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const ReplicaStatus* a, const ReplicaStatus* b) { return a->id < b->id; });
    for (const auto* r : sorted) roles_data += FormatReplica(*r);
  }
  return fmt::format(
      "AppStatus:\n    State: {}\n    Num Restarts: {}\n    Roles: {}\n    Msg: {}\n"
      "    Structured Error Msg: {}\n    UI URL: {}\n    ",
      AppStateName(state), num_restarts, roles_data, msg, structured_error_msg,
      ui_url ? *ui_url : "None");
}

Result<AppHandle> ParseAppHandle(std::string_view handle) {
  static const std::regex kHandle(R"((.+)://(.*)/(.+))");
  std::string s(handle);
  std::smatch m;
  if (!std::regex_match(s, m, kHandle)) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not an app handle: expected SCHEDULER://SESSION/APP_ID", handle));
  }
  return AppHandle{m.str(1), m.str(2), m.str(3)};
}

}  // namespace trun::specs
