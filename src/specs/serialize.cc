#include "specs/serialize.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <regex>

#include "common/files.h"
#include "common/problems.h"
#include "common/strings.h"
#include "specs/mounts.h"
#include "specs/named_resources.h"

namespace trun::specs {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "a mapping";
    default:
      return "a value";
  }
}

// Typed reads of one document, each problem recorded with its path.
class Reader {
 public:
  explicit Reader(Problems& p) : p_(p) {}

  // Reports fields of `obj` that are not in `allowed`.
  void OnlyFields(const json& obj, const std::string& path,
                  const std::vector<std::string>& allowed) {
    for (const auto& [k, v] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      std::string guess = ClosestMatch(k, allowed);
      p_.Add(fmt::format("{}: unknown field '{}'{}", Where(path), k,
                         guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
    }
  }

  bool IsObject(const json& v, const std::string& path) {
    if (v.is_object()) return true;
    p_.Add(fmt::format("{}: expected a mapping, got {}", Where(path), TypeName(v)));
    return false;
  }

  // Strings; YAML scalars that read as numbers or bools are taken as their
  // text, since a YAML author writes `image: 1.0` meaning the string.
  std::optional<std::string> Str(const json& v, const std::string& path) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float() || v.is_boolean()) {
      return v.dump();
    }
    p_.Add(fmt::format("{}: expected a string, got {}", Where(path), TypeName(v)));
    return std::nullopt;
  }

  std::optional<int> Int(const json& v, const std::string& path) {
    if (v.is_number_integer() || v.is_number_unsigned()) {
      long long x = v.get<long long>();
      if (x >= INT32_MIN && x <= INT32_MAX) return static_cast<int>(x);
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (d == static_cast<double>(static_cast<long long>(d)) && d >= INT32_MIN && d <= INT32_MAX) {
        return static_cast<int>(d);
      }
    }
    p_.Add(fmt::format("{}: expected an integer, got {}", Where(path),
                       v.is_number() ? v.dump() : TypeName(v)));
    return std::nullopt;
  }

  std::optional<bool> Bool(const json& v, const std::string& path) {
    if (v.is_boolean()) return v.get<bool>();
    p_.Add(fmt::format("{}: expected true or false, got {}", Where(path), TypeName(v)));
    return std::nullopt;
  }

  std::vector<std::string> StrList(const json& v, const std::string& path) {
    std::vector<std::string> out;
    if (!v.is_array()) {
      p_.Add(fmt::format("{}: expected a list, got {}", Where(path), TypeName(v)));
      return out;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (auto s = Str(v[i], fmt::format("{}[{}]", path, i))) out.push_back(*s);
    }
    return out;
  }

  std::map<std::string, std::string> StrMap(const json& v, const std::string& path) {
    std::map<std::string, std::string> out;
    if (v.is_null()) return out;
    if (!IsObject(v, path)) return out;
    for (const auto& [k, x] : v.items()) {
      if (auto s = Str(x, path + "." + k)) out[k] = *s;
    }
    return out;
  }

  std::map<std::string, int> IntMap(const json& v, const std::string& path) {
    std::map<std::string, int> out;
    if (v.is_null()) return out;
    if (!IsObject(v, path)) return out;
    for (const auto& [k, x] : v.items()) {
      if (auto n = Int(x, path + "." + k)) out[k] = *n;
    }
    return out;
  }

  void Add(std::string msg) { p_.Add(std::move(msg)); }

 private:
  static std::string Where(const std::string& path) { return path.empty() ? "the app" : path; }
  Problems& p_;
};

Resource ReadResource(const json& v, const std::string& path, Reader& r) {
  Resource res;
  if (v.is_null()) return res;
  if (v.is_string()) {
    auto named = NamedResource(v.get<std::string>());
    if (!named.ok()) {
      r.Add(path + ": " + named.status().message());
      return res;
    }
    return *named;
  }
  if (!r.IsObject(v, path)) return res;
  r.OnlyFields(v, path, {"cpu", "gpu", "memMB", "capabilities", "devices", "tags"});
  if (v.contains("cpu")) res.cpu = r.Int(v["cpu"], path + ".cpu").value_or(res.cpu);
  if (v.contains("gpu")) res.gpu = r.Int(v["gpu"], path + ".gpu").value_or(res.gpu);
  if (v.contains("memMB")) res.mem_mb = r.Int(v["memMB"], path + ".memMB").value_or(res.mem_mb);
  if (v.contains("capabilities") && !v["capabilities"].is_null()) {
    if (r.IsObject(v["capabilities"], path + ".capabilities")) res.capabilities = v["capabilities"];
  }
  if (v.contains("devices")) res.devices = r.IntMap(v["devices"], path + ".devices");
  if (v.contains("tags") && !v["tags"].is_null()) {
    if (r.IsObject(v["tags"], path + ".tags")) res.tags = v["tags"];
  }
  return res;
}

std::optional<Mount> ReadMount(const json& v, const std::string& path, Reader& r) {
  if (v.is_string()) {
    auto mounts = ParseMounts(Split(v.get<std::string>(), ','));
    if (!mounts.ok()) {
      r.Add(path + ": " + mounts.status().message());
      return std::nullopt;
    }
    if (mounts->size() != 1) {
      r.Add(path + ": expected one mount");
      return std::nullopt;
    }
    return (*mounts)[0];
  }
  if (!r.IsObject(v, path)) return std::nullopt;
  Mount m;
  std::string type = "bind";
  if (v.contains("type")) type = r.Str(v["type"], path + ".type").value_or(type);
  if (type == "bind") {
    m.type = MountType::kBind;
    r.OnlyFields(v, path, {"type", "src_path", "dst_path", "read_only"});
  } else if (type == "volume") {
    m.type = MountType::kVolume;
    r.OnlyFields(v, path, {"type", "src", "dst_path", "read_only"});
  } else if (type == "device") {
    m.type = MountType::kDevice;
    r.OnlyFields(v, path, {"type", "src_path", "dst_path", "permissions"});
  } else {
    r.Add(fmt::format("{}.type: expected bind, volume or device, got '{}'", path, type));
    return std::nullopt;
  }
  const char* src_key = m.type == MountType::kVolume ? "src" : "src_path";
  if (v.contains(src_key)) m.src = r.Str(v[src_key], path + "." + src_key).value_or("");
  if (v.contains("dst_path")) m.dst = r.Str(v["dst_path"], path + ".dst_path").value_or("");
  if (m.type == MountType::kDevice && m.dst.empty()) m.dst = m.src;
  if (v.contains("read_only"))
    m.read_only = r.Bool(v["read_only"], path + ".read_only").value_or(false);
  if (v.contains("permissions")) {
    m.permissions = r.Str(v["permissions"], path + ".permissions").value_or("rwm");
  }
  return m;
}

std::optional<Workspace> ReadWorkspace(const json& v, const std::string& path, Reader& r) {
  if (v.is_null()) return std::nullopt;
  Workspace w;
  // TorchX's Workspace.from_str: a plain path is one project at the root.
  if (v.is_string()) {
    if (!v.get<std::string>().empty()) w.projects[v.get<std::string>()] = "";
    return w;
  }
  if (!r.IsObject(v, path)) return std::nullopt;
  r.OnlyFields(v, path, {"projects"});
  if (!v.contains("projects")) return w;
  const json& p = v["projects"];
  if (!r.IsObject(p, path + ".projects")) return w;
  for (const auto& [k, x] : p.items()) {
    if (x.is_null()) {
      w.projects[k] = "";
    } else if (auto s = r.Str(x, path + ".projects." + k)) {
      w.projects[k] = *s;
    }
  }
  return w;
}

Role ReadRole(const json& v, const std::string& path, Reader& r) {
  Role role;
  if (!r.IsObject(v, path)) return role;
  r.OnlyFields(
      v, path,
      {"name", "image", "min_replicas", "entrypoint", "args", "env", "num_replicas", "max_retries",
       "retry_policy", "resource", "port_map", "metadata", "mounts", "workspace"});
  auto at = [&](const char* k) { return path + "." + k; };
  if (v.contains("name")) role.name = r.Str(v["name"], at("name")).value_or("");
  if (v.contains("image")) role.image = r.Str(v["image"], at("image")).value_or("");
  if (v.contains("min_replicas") && !v["min_replicas"].is_null()) {
    role.min_replicas = r.Int(v["min_replicas"], at("min_replicas"));
  }
  if (v.contains("entrypoint")) {
    role.entrypoint = r.Str(v["entrypoint"], at("entrypoint")).value_or(role.entrypoint);
  }
  if (v.contains("args")) role.args = r.StrList(v["args"], at("args"));
  if (v.contains("env")) role.env = r.StrMap(v["env"], at("env"));
  if (v.contains("num_replicas")) {
    role.num_replicas = r.Int(v["num_replicas"], at("num_replicas")).value_or(role.num_replicas);
  }
  if (v.contains("max_retries")) {
    role.max_retries = r.Int(v["max_retries"], at("max_retries")).value_or(role.max_retries);
  }
  if (v.contains("retry_policy")) {
    if (auto s = r.Str(v["retry_policy"], at("retry_policy"))) {
      std::string upper = *s;
      for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (auto p = ParseRetryPolicy(upper)) {
        role.retry_policy = *p;
      } else {
        r.Add(fmt::format("{}: expected REPLICA, APPLICATION or ROLE, got '{}'", at("retry_policy"),
                          *s));
      }
    }
  }
  if (v.contains("resource")) role.resource = ReadResource(v["resource"], at("resource"), r);
  if (v.contains("port_map")) role.port_map = r.IntMap(v["port_map"], at("port_map"));
  if (v.contains("metadata") && !v["metadata"].is_null()) {
    if (r.IsObject(v["metadata"], at("metadata"))) role.metadata = v["metadata"];
  }
  if (v.contains("mounts") && !v["mounts"].is_null()) {
    if (!v["mounts"].is_array()) {
      r.Add(fmt::format("{}: expected a list, got {}", at("mounts"), TypeName(v["mounts"])));
    } else {
      for (size_t i = 0; i < v["mounts"].size(); ++i) {
        if (auto m = ReadMount(v["mounts"][i], fmt::format("{}[{}]", at("mounts"), i), r)) {
          role.mounts.push_back(*m);
        }
      }
    }
  }
  if (v.contains("workspace")) role.workspace = ReadWorkspace(v["workspace"], at("workspace"), r);
  return role;
}

// ---- YAML ---------------------------------------------------------------------

bool IsNullScalar(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> BoolScalar(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// The YAML 1.2 core schema's reading of an unquoted scalar.
json PlainScalar(const std::string& s) {
  static const std::regex kInt(R"([-+]?[0-9]+)");
  static const std::regex kOct(R"(0o[0-7]+)");
  static const std::regex kHex(R"(0x[0-9a-fA-F]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (IsNullScalar(s)) return nullptr;
  if (auto b = BoolScalar(s)) return *b;
  try {
    if (std::regex_match(s, kInt)) return std::stoll(s);
    if (std::regex_match(s, kOct)) return std::stoll(s.substr(2), nullptr, 8);
    if (std::regex_match(s, kHex)) return std::stoll(s.substr(2), nullptr, 16);
    if (std::regex_match(s, kFloat)) return std::stod(s);
  } catch (const std::out_of_range&) {
    return s;  // too big for a number: keep the text
  }
  return s;
}

// Whether a YAML 1.1 reader (PyYAML; the yaml.v2 behind older kubectl)
// would read the unquoted scalar as something other than text, where the
// 1.2 core schema reads text: base-60 numbers ("1:4" is 64), yes/no/on/off
// and y/n, numbers with '_', binary and leading-zero octal.
bool Yaml11NonString(const std::string& s) {
  static const std::regex kSpecial(
      R"([-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|[-+]?[0-9][0-9_]*_[0-9_]*|[-+]?0b[01_]+|)"
      R"([-+]?0[0-7_]+|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|=|<<)");
  return std::regex_match(s, kSpecial);
}

json FromYamlNode(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      // "!" marks a quoted scalar, "?" a plain one; an explicit !!str tag
      // also keeps the text.
      if (n.Tag() == "?") return PlainScalar(n.Scalar());
      return n.Scalar();
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& child : n) arr.push_back(FromYamlNode(child));
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          throw YAML::ParserException(kv.first.Mark(), "a mapping key must be a scalar");
        }
        obj[kv.first.Scalar()] = FromYamlNode(kv.second);
      }
      return obj;
    }
  }
  return nullptr;
}

void EmitYaml(YAML::Emitter& out, const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::object:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        out << YAML::Key;
        if (PlainScalar(k) != json(k)) out << YAML::DoubleQuoted;
        out << k << YAML::Value;
        EmitYaml(out, v);
      }
      out << YAML::EndMap;
      return;
    case ojson::value_t::array:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const auto& v : j) EmitYaml(out, v);
      out << YAML::EndSeq;
      return;
    case ojson::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (PlainScalar(s) != json(s) || Yaml11NonString(s)) out << YAML::DoubleQuoted;
      out << s;
      return;
    }
    case ojson::value_t::null:
      out << YAML::Null;
      return;
    case ojson::value_t::boolean:
      out << (j.get<bool>() ? "true" : "false");
      return;
    default:
      out << j.dump();
      return;
  }
}

}  // namespace

ojson ToJson(const Resource& r) {
  ojson j;
  j["cpu"] = r.cpu;
  j["gpu"] = r.gpu;
  j["memMB"] = r.mem_mb;
  j["capabilities"] = ojson::parse(r.capabilities.dump());
  j["devices"] = r.devices;
  j["tags"] = ojson::parse(r.tags.dump());
  return j;
}

ojson ToJson(const Role& r) {
  ojson j;
  j["name"] = r.name;
  j["image"] = r.image;
  j["min_replicas"] = r.min_replicas ? ojson(*r.min_replicas) : ojson();
  j["entrypoint"] = r.entrypoint;
  j["args"] = r.args;
  j["env"] = r.env;
  j["num_replicas"] = r.num_replicas;
  j["max_retries"] = r.max_retries;
  j["retry_policy"] = std::string(RetryPolicyName(r.retry_policy));
  j["resource"] = ToJson(r.resource);
  j["port_map"] = r.port_map;
  j["metadata"] = ojson::parse(r.metadata.dump());
  j["mounts"] = ojson::array();
  for (const auto& m : r.mounts) {
    ojson mj;
    mj["type"] = std::string(MountTypeName(m.type));
    mj[m.type == MountType::kVolume ? "src" : "src_path"] = m.src;
    mj["dst_path"] = m.dst;
    if (m.type == MountType::kDevice) {
      mj["permissions"] = m.permissions;
    } else {
      mj["read_only"] = m.read_only;
    }
    j["mounts"].push_back(std::move(mj));
  }
  j["workspace"] = r.workspace ? ojson{{"projects", r.workspace->projects}} : ojson();
  return j;
}

ojson ToJson(const AppDef& app) {
  ojson j;
  j["name"] = app.name;
  j["roles"] = ojson::array();
  for (const auto& r : app.roles) j["roles"].push_back(ToJson(r));
  j["metadata"] = app.metadata;
  return j;
}

Result<AppDef> AppDefFromJson(const json& j) {
  Problems p;
  Reader r(p);
  AppDef app;
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("an AppDef must be a mapping with name and roles, got {}", TypeName(j)));
  }
  r.OnlyFields(j, "", {"name", "roles", "metadata"});
  if (j.contains("name")) app.name = r.Str(j["name"], "name").value_or("");
  if (j.contains("roles")) {
    if (!j["roles"].is_array()) {
      p.Add(fmt::format("roles: expected a list, got {}", TypeName(j["roles"])));
    } else {
      for (size_t i = 0; i < j["roles"].size(); ++i) {
        app.roles.push_back(ReadRole(j["roles"][i], fmt::format("roles[{}]", i), r));
      }
    }
  }
  if (j.contains("metadata")) app.metadata = r.StrMap(j["metadata"], "metadata");
  if (!p.empty()) return p.ToStatus();
  TRUN_RETURN_IF_ERROR(Validate(app));
  return app;
}

Result<json> ParseYaml(std::string_view text) {
  try {
    return FromYamlNode(YAML::Load(std::string(text)));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(
        fmt::format("line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

std::string ToYaml(const ojson& j) {
  YAML::Emitter out;
  out.SetIndent(2);
  EmitYaml(out, j);
  return std::string(out.c_str()) + "\n";
}

Result<AppDef> ParseAppDef(std::string_view text) {
  auto j = ParseYaml(text);
  if (!j.ok()) return j.status();
  return AppDefFromJson(*j);
}

std::string AppDefToYaml(const AppDef& app) { return ToYaml(ToJson(app)); }

Result<std::map<std::string, Resource>> ReadNamedResourcesFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok())
    return Status::InvalidArgument("TRUN_NAMED_RESOURCES: " + text.status().message());
  auto j = ParseYaml(*text);
  if (!j.ok()) return Status::InvalidArgument(path + ": " + j.status().message());
  Problems p;
  Reader r(p);
  std::map<std::string, Resource> out;
  if (!j->is_object()) {
    return Status::InvalidArgument(path + ": expected a mapping of names to resources");
  }
  for (const auto& [name, v] : j->items()) {
    if (v.is_string()) {
      p.Add(fmt::format("{}: expected cpu, gpu and memMB, not another name", name));
      continue;
    }
    out[name] = ReadResource(v, name, r);
  }
  if (!p.empty()) return Status::InvalidArgument(path + ": " + p.ToStatus().message());
  return out;
}

}  // namespace trun::specs
