#include "specs/runopts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "common/problems.h"
#include "common/strings.h"

namespace trun::specs {
namespace {

// "logDir" -> "log_dir" (TorchX's cases.camel_to_snake).
std::string CamelToSnake(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (std::isupper(static_cast<unsigned char>(c)) && i > 0 &&
        (std::islower(static_cast<unsigned char>(name[i - 1])) ||
         std::isdigit(static_cast<unsigned char>(name[i - 1])))) {
      out += '_';
    }
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string PyQuote(const std::string& s) {
  // Python's repr of a str: single quotes unless the text has one.
  char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    out += c;
  }
  return out + q;
}

bool HasType(const CfgValue& v, OptType t) {
  switch (t) {
    case OptType::kStr:
      return std::holds_alternative<std::string>(v);
    case OptType::kInt:
      return std::holds_alternative<long long>(v);
    case OptType::kFloat:
      return std::holds_alternative<double>(v) || std::holds_alternative<long long>(v);
    case OptType::kBool:
      return std::holds_alternative<bool>(v);
    case OptType::kListStr:
      return std::holds_alternative<std::vector<std::string>>(v);
    case OptType::kDictStr:
      return std::holds_alternative<std::map<std::string, std::string>>(v);
  }
  return false;
}

}  // namespace

std::string_view OptTypeName(OptType t) {
  switch (t) {
    case OptType::kStr:
      return "str";
    case OptType::kInt:
      return "int";
    case OptType::kFloat:
      return "float";
    case OptType::kBool:
      return "bool";
    case OptType::kListStr:
      return "list[str]";
    case OptType::kDictStr:
      return "dict[str, str]";
  }
  return "str";
}

std::string CfgValueToString(const CfgValue& v) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(long long x) const { return std::to_string(x); }
    std::string operator()(double x) const {
      std::string s = fmt::format("{}", x);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + PyQuote(l[i]);
      return out + "]";
    }
    std::string operator()(const std::map<std::string, std::string>& m) const {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : m) {
        out += (first ? "" : ", ") + PyQuote(k) + ": " + PyQuote(x);
        first = false;
      }
      return out + "}";
    }
  };
  return std::visit(Visitor{}, v);
}

void RunOpts::Add(std::string name, OptType type, std::string help, CfgValue default_value,
                  bool required) {
  opts_.push_back({std::move(name), type, std::move(default_value), required, std::move(help)});
}

const RunOpt* RunOpts::Get(std::string_view name) const {
  for (const auto& o : opts_) {
    if (o.name == name) return &o;
  }
  std::string snake = CamelToSnake(name);
  for (const auto& o : opts_) {
    if (o.name == snake) return &o;
  }
  return nullptr;
}

std::vector<std::string> RunOpts::Names() const {
  std::vector<std::string> out;
  for (const auto& o : opts_) out.push_back(o.name);
  return out;
}

Result<CfgValue> RunOpts::Cast(const RunOpt& opt, std::string_view text) {
  auto bad = [&](std::string_view expected) {
    return Status::InvalidArgument(
        fmt::format("{}: expected {}, got '{}'", opt.name, expected, text));
  };
  switch (opt.type) {
    case OptType::kStr:
      return CfgValue(std::string(text));
    case OptType::kInt:
      if (auto v = ParseInt(text)) return CfgValue(*v);
      return bad("an integer");
    case OptType::kFloat:
      if (auto v = ParseDouble(text)) return CfgValue(*v);
      return bad("a number");
    case OptType::kBool:
      if (auto b = ParseBool(text)) return CfgValue(*b);
      return bad("true/1/yes/on or false/0/no/off");
    case OptType::kListStr: {
      std::string s(text);
      std::replace(s.begin(), s.end(), ';', ',');
      std::vector<std::string> out;
      for (auto& item : Split(s, ',')) {
        if (!item.empty()) out.push_back(item);
      }
      return CfgValue(out);
    }
    case OptType::kDictStr: {
      std::string s(text);
      std::replace(s.begin(), s.end(), ';', ',');
      std::map<std::string, std::string> out;
      for (auto& item : Split(s, ',')) {
        size_t colon = item.find(':');
        if (colon == std::string::npos) return bad("key:value pairs, e.g. a:1,b:2");
        out[item.substr(0, colon)] = item.substr(colon + 1);
      }
      return CfgValue(out);
    }
  }
  return bad("a value");
}

Result<Cfg> RunOpts::CfgFromStr(std::string_view text, std::string_view scheduler) const {
  Cfg cfg;
  if (Trim(text).empty()) return cfg;
  auto pairs = ToDict(text);
  if (!pairs.ok()) return Status::InvalidArgument("-cfg: " + pairs.status().message());
  Problems p;
  for (const auto& [key, val] : *pairs) {
    const RunOpt* opt = Get(key);
    if (!opt) {
      std::string guess = ClosestMatch(key, Names());
      p.Add(
          fmt::format("-cfg: '{}' is not an option of the {} scheduler{}; `trun runopts {}` "
                      "lists them",
                      key, scheduler,
                      guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess), scheduler));
      continue;
    }
    auto v = Cast(*opt, val);
    if (!v.ok()) {
      p.Add("-cfg: " + v.status().message());
      continue;
    }
    cfg[opt->name] = std::move(*v);
  }
  if (!p.empty()) return p.ToStatus();
  return cfg;
}

Result<Cfg> RunOpts::Resolve(const Cfg& cfg, std::string_view scheduler) const {
  Problems p;
  Cfg out;
  for (const auto& [k, v] : cfg) {
    const RunOpt* opt = Get(k);
    if (!opt) {
      p.Add(fmt::format("'{}' is not an option of the {} scheduler", k, scheduler));
      continue;
    }
    if (!std::holds_alternative<std::monostate>(v) && !HasType(v, opt->type)) {
      p.Add(fmt::format("run option {} must be of type {}, but was {}", opt->name,
                        OptTypeName(opt->type), CfgValueToString(v)));
      continue;
    }
    out[opt->name] = v;
  }
  for (const auto& o : opts_) {
    auto it = out.find(o.name);
    bool unset = it == out.end() || std::holds_alternative<std::monostate>(it->second);
    if (o.required && unset) {
      p.Add(fmt::format(
          "the {} scheduler needs run option {} ({}: {}); give it with -cfg {}=VALUE or in "
          "the [{}] section of .trunconfig",
          scheduler, o.name, OptTypeName(o.type), o.help, o.name, scheduler));
    } else if (it == out.end()) {
      out[o.name] = o.default_value;
    }
  }
  if (!p.empty()) return p.ToStatus();
  return out;
}

std::string RunOpts::Format() const {
  std::vector<const RunOpt*> required, optional;
  for (const auto& o : opts_) (o.required ? required : optional).push_back(&o);
  std::string out = "    usage:\n        ";
  size_t i = 0;
  auto upper_of = [](const std::string& s) {
    std::string u = s;
    for (auto& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return u;
  };
  for (const auto* group : {&required, &optional}) {
    for (const auto* o : *group) {
      std::string item = o->name + "=" + upper_of(o->name);
      if (!o->required) item = "[" + item + "]";
      out += (i++ ? "," : "") + item;
    }
  }
  const std::pair<const char*, const std::vector<const RunOpt*>*> sections[] = {
      {"required", &required}, {"optional", &optional}};
  for (const auto& [title, group] : sections) {
    if (group->empty()) continue;
    out += fmt::format("\n\n    {} arguments:", title);
    for (const auto* o : *group) {
      std::string def = o->required ? "" : ", " + CfgValueToString(o->default_value);
      out += fmt::format("\n        {}={} ({}{})\n            {}", o->name, upper_of(o->name),
                         OptTypeName(o->type), def, o->help);
    }
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ToDict(std::string_view arg) {
  std::vector<std::pair<std::string, std::string>> out;
  if (arg.empty()) return out;
  // Quoted values are set aside first, so their "=", "," and ";" are text.
  std::vector<std::string> quoted;
  std::string text;
  for (size_t i = 0; i < arg.size(); ++i) {
    char c = arg[i];
    if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < arg.size() && arg[j] != c) j += arg[j] == '\\' ? 2 : 1;
      if (j < arg.size()) {
        quoted.emplace_back(arg.substr(i, j - i + 1));
        text += fmt::format("__QUOTED_{}__", quoted.size() - 1);
        i = j;
        continue;
      }
    }
    text += c;
  }
  auto restore = [&](std::string v) {
    for (size_t i = 0; i < quoted.size(); ++i) {
      std::string mark = fmt::format("__QUOTED_{}__", i);
      size_t pos;
      while ((pos = v.find(mark)) != std::string::npos) v.replace(pos, mark.size(), quoted[i]);
    }
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
      return v.substr(1, v.size() - 2);
    }
    return v;
  };
  auto put = [&](const std::string& k, std::string v) {
    for (auto& [key, val] : out) {
      if (key == k) {
        val = std::move(v);
        return;
      }
    }
    out.emplace_back(k, std::move(v));
  };
  std::vector<std::string> parts;
  for (const auto& s : Split(text, '=')) {
    std::string t(Trim(s));
    if (!t.empty()) parts.push_back(t);
  }
  if (parts.size() < 2) {
    return Status::InvalidArgument(
        fmt::format("'{}' does not have at least one key=value pair", arg));
  }
  std::string key = parts[0];
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    const std::string& vk = parts[i];
    size_t comma = vk.rfind(',');
    size_t semi = vk.rfind(';');
    size_t idx = comma == std::string::npos  ? semi
                 : semi == std::string::npos ? comma
                                             : std::max(comma, semi);
    if (idx == std::string::npos || idx == 0 || idx + 1 == vk.size()) {
      return Status::InvalidArgument(fmt::format(
          "'{}' in '{}' cannot be split into a value, a ',' or ';', and the next key", vk, arg));
    }
    put(key, restore(std::string(Trim(vk.substr(0, idx)))));
    key = std::string(Trim(vk.substr(idx + 1)));
  }
  put(key, restore(parts.back()));
  return out;
}

std::vector<std::string> ToList(std::string_view arg) {
  std::vector<std::string> out;
  if (Trim(arg).empty()) return out;
  for (const auto& item : Split(arg, ',')) out.emplace_back(Trim(item));
  return out;
}

}  // namespace trun::specs
