#include "components/file_component.h"

#include <fmt/format.h>

#include <regex>

#include "common/files.h"
#include "common/problems.h"
#include "common/strings.h"
#include "specs/macros.h"
#include "specs/serialize.h"

namespace trun::components {
namespace {

using json = nlohmann::json;
using specs::CfgValue;

const std::map<std::string, ParamType>& TypeNames() {
  static const std::map<std::string, ParamType> kTypes = {
      {"str", ParamType::kStr},        {"int", ParamType::kInt},   {"float", ParamType::kFloat},
      {"bool", ParamType::kBool},      {"list", ParamType::kList}, {"dict", ParamType::kDict},
      {"varargs", ParamType::kVarArgs}};
  return kTypes;
}

std::optional<std::string> ScalarText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  return std::nullopt;
}

// A declared default, as the parameter's type.
std::optional<CfgValue> DefaultOf(const json& v, ParamType t) {
  if (v.is_null()) return CfgValue();
  switch (t) {
    case ParamType::kStr:
      if (auto s = ScalarText(v)) return CfgValue(*s);
      break;
    case ParamType::kInt:
      if (v.is_number_integer()) return CfgValue(v.get<long long>());
      break;
    case ParamType::kFloat:
      if (v.is_number()) return CfgValue(v.get<double>());
      break;
    case ParamType::kBool:
      if (v.is_boolean()) return CfgValue(v.get<bool>());
      break;
    case ParamType::kList:
    case ParamType::kVarArgs:
      if (v.is_array()) {
        std::vector<std::string> out;
        for (const auto& x : v) {
          auto s = ScalarText(x);
          if (!s) return std::nullopt;
          out.push_back(*s);
        }
        return CfgValue(out);
      }
      break;
    case ParamType::kDict:
      if (v.is_object()) {
        std::map<std::string, std::string> out;
        for (const auto& [k, x] : v.items()) {
          auto s = ScalarText(x);
          if (!s) return std::nullopt;
          out[k] = *s;
        }
        return CfgValue(out);
      }
      break;
  }
  return std::nullopt;
}

// How a value reads inside a longer string: its command-line form.
std::string ValueText(const CfgValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return "";
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* l = std::get_if<std::vector<std::string>>(&v)) {
    std::string s;
    for (size_t i = 0; i < l->size(); ++i) s += (i ? "," : "") + (*l)[i];
    return s;
  }
  if (const auto* m = std::get_if<std::map<std::string, std::string>>(&v)) {
    std::string s;
    for (const auto& [k, x] : *m) s += (s.empty() ? "" : ",") + k + "=" + x;
    return s;
  }
  return specs::CfgValueToString(v);
}

struct Bindings {
  std::map<std::string, CfgValue> typed;
  std::map<std::string, std::string> text;
};

// The parameter a string names when it is exactly "${name}".
const CfgValue* WholePlaceholder(const json& v, const Bindings& b) {
  static const std::regex kWhole(R"(\$\{([_A-Za-z][_A-Za-z0-9]*)\})");
  if (!v.is_string()) return nullptr;
  std::smatch m;
  const std::string& s = v.get_ref<const std::string&>();
  if (!std::regex_match(s, m, kWhole)) return nullptr;
  auto it = b.typed.find(m.str(1));
  return it == b.typed.end() ? nullptr : &it->second;
}

json Substitute(const json& v, const Bindings& b) {
  if (const CfgValue* whole = WholePlaceholder(v, b)) return ValueJson(*whole);
  if (v.is_string()) return specs::SafeSubstitute(v.get<std::string>(), b.text, true);
  if (v.is_array()) {
    json out = json::array();
    for (const auto& x : v) {
      const CfgValue* whole = WholePlaceholder(x, b);
      if (whole && std::holds_alternative<std::vector<std::string>>(*whole)) {
        for (const auto& item : std::get<std::vector<std::string>>(*whole)) out.push_back(item);
      } else {
        out.push_back(Substitute(x, b));
      }
    }
    return out;
  }
  if (v.is_object()) {
    json out = json::object();
    for (const auto& [k, x] : v.items()) out[k] = Substitute(x, b);
    return out;
  }
  return v;
}

}  // namespace

json ValueJson(const CfgValue& v) {
  struct Visitor {
    json operator()(std::monostate) const { return nullptr; }
    json operator()(const std::string& s) const { return s; }
    json operator()(long long x) const { return x; }
    json operator()(double x) const { return x; }
    json operator()(bool b) const { return b; }
    json operator()(const std::vector<std::string>& l) const { return l; }
    json operator()(const std::map<std::string, std::string>& m) const { return m; }
  };
  return std::visit(Visitor{}, v);
}

Result<Param> ReadParam(const std::string& name, const json& v, Problems& p) {
  static const std::regex kIdent(R"([_A-Za-z][_A-Za-z0-9]*)");
  Param param;
  param.name = name;
  if (!std::regex_match(name, kIdent)) {
    p.Add(fmt::format("params.{}: a parameter name must be an identifier", name));
  }
  json spec = v.is_string() ? json{{"type", v}} : v;
  if (!spec.is_object()) {
    p.Add(fmt::format("params.{}: expected a mapping with type, default, help", name));
    return param;
  }
  std::vector<std::string> fields = {"type", "default", "help", "aliases"};
  for (const auto& [k, x] : spec.items()) {
    if (std::find(fields.begin(), fields.end(), k) == fields.end()) {
      std::string guess = ClosestMatch(k, fields);
      p.Add(fmt::format("params.{}: unknown field '{}'{}", name, k,
                        guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
    }
  }
  std::string type =
      spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "str";
  auto t = TypeNames().find(type);
  if (t == TypeNames().end()) {
    p.Add(
        fmt::format("params.{}.type: expected str, int, float, bool, list, dict or varargs, got "
                    "'{}'",
                    name, spec.contains("type") ? spec["type"].dump() : type));
    return param;
  }
  param.type = t->second;
  if (spec.contains("help")) param.help = ScalarText(spec["help"]).value_or("");
  if (spec.contains("aliases")) {
    if (!spec["aliases"].is_array()) {
      p.Add(fmt::format("params.{}.aliases: expected a list like [-x]", name));
    } else {
      for (const auto& a : spec["aliases"]) {
        std::string alias = a.is_string() ? a.get<std::string>() : "";
        if (alias.size() < 2 || alias[0] != '-') {
          p.Add(fmt::format("params.{}.aliases: '{}' must start with '-'", name, a.dump()));
        } else {
          param.aliases.push_back(alias);
        }
      }
    }
  }
  if (spec.contains("default")) {
    auto d = DefaultOf(spec["default"], param.type);
    if (!d) {
      p.Add(fmt::format("params.{}.default: {} is not a {}", name, spec["default"].dump(), type));
    } else {
      param.default_value = *d;
    }
  } else {
    param.required = param.type != ParamType::kVarArgs;
  }
  return param;
}

Result<Component> LoadFileComponent(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    return Status::InvalidArgument(
        fmt::format("component file '{}': {}", path, text.status().message()));
  }
  auto doc = specs::ParseYaml(*text);
  if (!doc.ok()) return Status::InvalidArgument(path + ": " + doc.status().message());
  Component c;
  c.name = path;
  if (!doc->is_object() || (!doc->contains("app") && !doc->contains("params"))) {
    auto app = specs::AppDefFromJson(*doc);
    if (!app.ok()) return Status::InvalidArgument(path + ":\n" + app.status().message());
    c.summary = "the AppDef in " + path;
    c.description = c.summary + "; it takes no arguments.";
    c.build = [app = *app](const ComponentArgs&) -> Result<specs::AppDef> { return app; };
    return c;
  }
  Problems p;
  for (const auto& [k, v] : doc->items()) {
    if (k != "description" && k != "params" && k != "app") {
      p.Add(fmt::format("unknown field '{}'; a component file has description, params and app", k));
    }
  }
  if (doc->contains("description")) {
    c.description = ScalarText((*doc)["description"]).value_or("");
    while (!c.description.empty() && c.description.back() == '\n') c.description.pop_back();
  }
  c.summary = c.description.substr(0, c.description.find('\n'));
  int varargs = 0;
  if (doc->contains("params") && !(*doc)["params"].is_null()) {
    if (!(*doc)["params"].is_object()) {
      p.Add("params: expected a mapping of parameter names");
    } else {
      for (const auto& [name, v] : (*doc)["params"].items()) {
        for (const char* macro : {"img_root", "app_id", "replica_id", "rank0_env"}) {
          if (name == macro) {
            p.Add(
                fmt::format("params.{}: the name is taken by TorchX's macro ${{{}}}", name, name));
          }
        }
        auto param = ReadParam(name, v, p);
        if (param->type == ParamType::kVarArgs) ++varargs;
        c.params.push_back(*param);
      }
    }
  }
  if (varargs > 1) p.Add("params: at most one parameter may have type varargs");
  if (!doc->contains("app") || !(*doc)["app"].is_object()) {
    p.Add("app: expected the AppDef template (name, roles, ...)");
  }
  if (!p.empty()) return Status::InvalidArgument(path + ":\n" + p.ToStatus().message());
  json tmpl = (*doc)["app"];
  c.build = [tmpl, path](const ComponentArgs& a) -> Result<specs::AppDef> {
    Bindings b;
    for (const auto& [k, v] : a.values) {
      b.typed[k] = v;
      b.text[k] = ValueText(v);
    }
    auto app = specs::AppDefFromJson(Substitute(tmpl, b));
    if (!app.ok()) return Status::InvalidArgument(path + ":\n" + app.status().message());
    return app;
  };
  // *args is bound under its own name too.
  std::string varargs_name;
  for (const auto& param : c.params) {
    if (param.type == ParamType::kVarArgs) varargs_name = param.name;
  }
  if (!varargs_name.empty()) {
    auto inner = c.build;
    c.build = [inner, varargs_name](const ComponentArgs& a) {
      ComponentArgs with = a;
      with.values[varargs_name] = a.varargs;
      return inner(with);
    };
  }
  return c;
}

}  // namespace trun::components
