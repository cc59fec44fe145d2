#include "components/component.h"

#include <fmt/format.h>

#include <cctype>
#include <regex>
#include <set>

#include "common/problems.h"
#include "common/strings.h"

namespace trun::components {
namespace {

using specs::CfgValue;

// argparse reads "-1" and "-.5" as positional values, not options, when no
// option looks like a number (none of ours does).
bool LooksLikeNegativeNumber(const std::string& s) {
  static const std::regex kNum(R"(-\d+$|-\d*\.\d+$)");
  return std::regex_match(s, kNum);
}

bool IsOptionLike(const std::string& s) {
  return s.size() > 1 && s[0] == '-' && !LooksLikeNegativeNumber(s);
}

// The spellings of a parameter's option: --name, --name-with-dashes, -x for
// one letter, and declared aliases.
std::vector<std::string> Spellings(const Param& p) {
  std::vector<std::string> out = {"--" + p.name};
  std::string dashed = p.name;
  for (auto& c : dashed) c = c == '_' ? '-' : c;
  if (dashed != p.name) out.push_back("--" + dashed);
  if (p.name.size() == 1) out.push_back("-" + p.name);
  for (const auto& a : p.aliases) out.push_back(a);
  return out;
}

std::string Display(const Param& p) {
  if (!p.aliases.empty()) return p.aliases[0];
  return p.name.size() == 1 ? "-" + p.name : "--" + p.name;
}

// Text (from the command line or .trunconfig) to the parameter's type. An
// empty list or dict is None, as TorchX decodes it.
Result<CfgValue> Decode(const Param& p, const std::string& text) {
  auto bad = [&](const char* what) {
    return Status::InvalidArgument(
        fmt::format("argument {}: invalid {} value: '{}'", Display(p), what, text));
  };
  switch (p.type) {
    case ParamType::kStr:
      return CfgValue(text);
    case ParamType::kInt:
      if (auto v = ParseInt(text)) return CfgValue(*v);
      return bad("int");
    case ParamType::kFloat:
      if (auto v = ParseDouble(text)) return CfgValue(*v);
      return bad("float");
    case ParamType::kBool:
      if (auto b = ParseBool(text)) return CfgValue(*b);
      return bad("bool (true or false)");
    case ParamType::kList: {
      if (text.empty()) return CfgValue();
      return CfgValue(specs::ToList(text));
    }
    case ParamType::kDict: {
      if (text.empty()) return CfgValue();
      auto pairs = specs::ToDict(text);
      if (!pairs.ok()) {
        return Status::InvalidArgument(
            fmt::format("argument {}: {}", Display(p), pairs.status().message()));
      }
      return CfgValue(std::map<std::string, std::string>(pairs->begin(), pairs->end()));
    }
    case ParamType::kVarArgs:
      break;
  }
  return bad("value");
}

std::string DefaultText(const Param& p) {
  if (std::holds_alternative<std::monostate>(p.default_value)) return "None";
  if (const auto* l = std::get_if<std::vector<std::string>>(&p.default_value)) {
    std::string s;
    for (size_t i = 0; i < l->size(); ++i) s += (i ? "," : "") + (*l)[i];
    return s;
  }
  if (const auto* m = std::get_if<std::map<std::string, std::string>>(&p.default_value)) {
    std::string s;
    for (const auto& [k, v] : *m) s += (s.empty() ? "" : ",") + k + "=" + v;
    return s;
  }
  return specs::CfgValueToString(p.default_value);
}

const CfgValue& Value(const ComponentArgs& a, const std::string& name) {
  static const CfgValue kNone;
  auto it = a.values.find(name);
  return it == a.values.end() ? kNone : it->second;
}

}  // namespace

bool ComponentArgs::IsNone(const std::string& name) const {
  return std::holds_alternative<std::monostate>(Value(*this, name));
}

std::string ComponentArgs::Str(const std::string& name) const {
  const auto* s = std::get_if<std::string>(&Value(*this, name));
  return s ? *s : "";
}

long long ComponentArgs::Int(const std::string& name) const {
  const auto* v = std::get_if<long long>(&Value(*this, name));
  return v ? *v : 0;
}

double ComponentArgs::Float(const std::string& name) const {
  const auto& v = Value(*this, name);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<long long>(&v)) return static_cast<double>(*i);
  return 0;
}

bool ComponentArgs::Bool(const std::string& name) const {
  const auto* b = std::get_if<bool>(&Value(*this, name));
  return b && *b;
}

std::vector<std::string> ComponentArgs::List(const std::string& name) const {
  const auto* l = std::get_if<std::vector<std::string>>(&Value(*this, name));
  return l ? *l : std::vector<std::string>{};
}

std::map<std::string, std::string> ComponentArgs::Dict(const std::string& name) const {
  const auto* m = std::get_if<std::map<std::string, std::string>>(&Value(*this, name));
  return m ? *m : std::map<std::string, std::string>{};
}

Result<ParsedArgs> ParseComponentArgs(const Component& c, const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& config_defaults) {
  Problems p;
  ParsedArgs out;
  std::map<std::string, const Param*> by_spelling;
  std::vector<std::string> spellings = {"--help"};
  const Param* varargs = nullptr;
  for (const auto& param : c.params) {
    if (param.type == ParamType::kVarArgs) {
      varargs = &param;
      continue;
    }
    for (const auto& s : Spellings(param)) {
      by_spelling[s] = &param;
      spellings.push_back(s);
    }
  }
  auto where = [&](const std::string& msg) { return fmt::format("{}: {}", c.name, msg); };

  std::map<std::string, std::string> given;  // parameter name -> text from the command line
  std::optional<std::vector<std::string>> given_varargs;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& tok = argv[i];
    if (tok == "--help") {
      out.help = true;
      return out;
    }
    if (tok == "--" || !IsOptionLike(tok)) {
      size_t start = tok == "--" ? i + 1 : i;
      if (!varargs) {
        std::string rest;
        for (size_t k = start; k < argv.size(); ++k) rest += (rest.empty() ? "" : " ") + argv[k];
        if (!rest.empty()) {
          p.Add(where(fmt::format("unrecognized arguments: {} ({} takes no positional arguments)",
                                  rest, c.name)));
        }
      } else {
        given_varargs.emplace(argv.begin() + static_cast<long>(start), argv.end());
      }
      break;
    }
    // An option: "--name", "--name=value", "-x", "-xVALUE".
    std::string opt = tok, value;
    bool has_value = false;
    const Param* param = nullptr;
    if (auto it = by_spelling.find(tok); it != by_spelling.end()) {
      param = it->second;
    } else if (size_t eq = tok.find('='); eq != std::string::npos && tok.rfind("--", 0) == 0) {
      opt = tok.substr(0, eq);
      value = tok.substr(eq + 1);
      has_value = true;
      if (auto it2 = by_spelling.find(opt); it2 != by_spelling.end()) param = it2->second;
    } else if (tok[1] != '-') {
      // A single-dash option with its value attached, longest spelling first.
      for (size_t len = tok.size() - 1; len >= 2 && !param; --len) {
        auto it2 = by_spelling.find(tok.substr(0, len));
        if (it2 != by_spelling.end()) {
          param = it2->second;
          opt = tok.substr(0, len);
          value = tok.substr(len);
          has_value = true;
        }
      }
    }
    if (!param) {
      std::string guess = ClosestMatch(opt, spellings);
      p.Add(where(fmt::format("unrecognized argument '{}'{}", opt,
                              guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess))));
      if (!has_value && i + 1 < argv.size() && !IsOptionLike(argv[i + 1])) ++i;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argv.size() || IsOptionLike(argv[i + 1]) || argv[i + 1] == "--") {
        p.Add(where(fmt::format("argument {}: expected one argument", opt)));
        continue;
      }
      value = argv[++i];
    }
    if (given.count(param->name)) {
      p.Add(where(fmt::format("argument {} is given more than once", Display(*param))));
      continue;
    }
    given[param->name] = value;
  }

  for (const auto& param : c.params) {
    if (param.type == ParamType::kVarArgs) {
      if (given_varargs) {
        out.args.varargs = *given_varargs;
      } else if (auto it = config_defaults.find(param.name); it != config_defaults.end()) {
        for (auto& w : Split(it->second, ' ')) {
          for (auto& x : Split(w, '\n')) {
            if (!Trim(x).empty()) out.args.varargs.emplace_back(Trim(x));
          }
        }
      } else if (const auto* l = std::get_if<std::vector<std::string>>(&param.default_value)) {
        out.args.varargs = *l;
      }
      if (!out.args.varargs.empty() && out.args.varargs[0] == "--") {
        out.args.varargs.erase(out.args.varargs.begin());
      }
      continue;
    }
    std::optional<std::string> text;
    std::string from;
    if (auto it = given.find(param.name); it != given.end()) {
      text = it->second;
    } else if (auto it2 = config_defaults.find(param.name); it2 != config_defaults.end()) {
      text = it2->second;
      from = " (from [component:" + c.name + "] in .trunconfig)";
    }
    if (!text) {
      if (param.required) {
        p.Add(where(fmt::format("the argument {} is required", Display(param))));
      }
      out.args.values[param.name] = param.default_value;
      continue;
    }
    auto v = Decode(param, *text);
    if (!v.ok()) {
      p.Add(where(v.status().message() + from));
      continue;
    }
    out.args.values[param.name] = std::move(*v);
  }
  for (const auto& [k, v] : config_defaults) {
    bool known = false;
    for (const auto& param : c.params) known = known || param.name == k;
    if (!known) {
      p.Add(where(fmt::format("[component:{}] in .trunconfig sets '{}', which is not an argument",
                              c.name, k)));
    }
  }
  if (!p.empty()) {
    return Status::InvalidArgument(p.ToStatus().message() +
                                   fmt::format("\nsee `trun run {} --help`", c.name));
  }
  return out;
}

std::string ComponentHelp(const Component& c) {
  std::string usage = "usage: trun run [run options] " + c.name;
  const Param* varargs = nullptr;
  for (const auto& p : c.params) {
    if (p.type == ParamType::kVarArgs) {
      varargs = &p;
      continue;
    }
    std::string metavar = p.name;
    for (auto& ch : metavar) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    std::string item = Display(p) + " " + metavar;
    usage += p.required ? " " + item : " [" + item + "]";
  }
  if (varargs) usage += " [" + varargs->name + " ...]";
  std::string out = usage + "\n\n" + c.description + "\n";
  auto line = [&](const std::string& left, const std::string& help) {
    std::string l = "  " + left;
    if (l.size() < 24) {
      l.resize(24, ' ');
    } else {
      l += "\n" + std::string(24, ' ');
    }
    std::string body = help;
    size_t pos = 0;
    while ((pos = body.find('\n', pos)) != std::string::npos) {
      body.insert(pos + 1, std::string(24, ' '));
      pos += 25;
    }
    out += l + body + "\n";
  };
  if (varargs) {
    out += "\npositional arguments:\n";
    line(varargs->name, varargs->help);
  }
  out += "\narguments:\n";
  line("--help", "show this help message and exit");
  for (const auto& p : c.params) {
    if (p.type == ParamType::kVarArgs) continue;
    std::string left;
    for (const auto& s : Spellings(p)) left += (left.empty() ? "" : ", ") + s;
    std::string metavar = p.name;
    for (auto& ch : metavar) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    std::string suffix = p.required ? " (required)" : " (default: " + DefaultText(p) + ")";
    line(left + " " + metavar, p.help + suffix);
  }
  return out;
}

Result<specs::AppDef> Materialize(const Component& c, const ComponentArgs& args) {
  auto app = c.build(args);
  if (!app.ok()) {
    // What a component rejects is its arguments (a bad -j, an unknown named
    // resource): the user's input.
    StatusCode code = app.status().code();
    if (code != StatusCode::kInvalidArgument && code != StatusCode::kNotFound) return app.status();
    return Status::InvalidArgument(c.name + ": " + app.status().message());
  }
  Status s = specs::Validate(*app);
  if (!s.ok()) {
    return Status::InvalidArgument(
        fmt::format("{} built an invalid AppDef:\n{}", c.name, s.message()));
  }
  return app;
}

}  // namespace trun::components
