#include "specs/config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace trun::specs {
namespace {

constexpr std::string_view kNoneValue = "None";

std::string_view TrimAll(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<IniSection>> ParseIni(std::string_view text, std::string_view file) {
  std::vector<IniSection> sections;
  std::set<std::string> section_names;
  std::set<std::string> keys;  // of the current section
  IniSection* cur = nullptr;
  std::string* value = nullptr;  // the value a continuation line extends
  size_t key_indent = 0;
  int lineno = 0;
  auto error = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}, line {}: {}", file, lineno, what));
  };
  for (const auto& raw : Split(text, '\n')) {
    ++lineno;
    std::string_view line = TrimAll(raw);
    size_t indent = raw.find_first_not_of(" \t");
    if (line.empty()) {
      value = nullptr;
      continue;
    }
    if (line[0] == '#' || line[0] == ';') continue;
    if (value && indent > key_indent) {
      *value += "\n" + std::string(line);
      continue;
    }
    value = nullptr;
    if (line.front() == '[' && line.back() == ']' && line.size() > 2) {
      std::string name(line.substr(1, line.size() - 2));
      if (!section_names.insert(name).second) {
        return error(fmt::format("section [{}] appears twice", name));
      }
      sections.push_back({name, {}});
      cur = &sections.back();
      keys.clear();
      continue;
    }
    if (!cur) return error("a key before any [section]");
    size_t delim = line.find_first_of("=:");
    if (delim == std::string_view::npos) {
      return error(fmt::format("'{}' is not 'key = value'", line));
    }
    std::string key(TrimAll(line.substr(0, delim)));
    if (key.empty()) return error("a value without a key");
    if (!keys.insert(key).second) {
      return error(fmt::format("key '{}' appears twice in [{}]", key, cur->name));
    }
    cur->entries.emplace_back(key, std::string(TrimAll(line.substr(delim + 1))));
    value = &cur->entries.back().second;
    key_indent = indent;
  }
  return sections;
}

std::string FormatIni(const std::vector<IniSection>& sections) {
  std::string out;
  for (const auto& s : sections) {
    if (!out.empty()) out += "\n";
    out += "[" + s.name + "]\n";
    for (const auto& [k, v] : s.entries) {
      std::string value = v;
      size_t pos = 0;
      // A multi-line value continues on indented lines.
      while ((pos = value.find('\n', pos)) != std::string::npos) {
        value.insert(pos + 1, "\t");
        pos += 2;
      }
      out += k + " = " + value + "\n";
    }
  }
  return out;
}

Result<TrunConfig> TrunConfig::Load() {
  const char* env = std::getenv("TRUNCONFIG");
  if (env) {
    if (!*env) return TrunConfig();
    if (::access(env, R_OK) != 0) {
      return Status::InvalidArgument(
          fmt::format("TRUNCONFIG={} does not exist or cannot be read", env));
    }
    return FromFiles({env});
  }
  std::vector<std::string> paths;
  if (const char* home = std::getenv("HOME"); home && *home) {
    paths.push_back(std::string(home) + "/" + std::string(kConfigFile));
  }
  paths.emplace_back(kConfigFile);
  return FromFiles(paths);
}

Result<TrunConfig> TrunConfig::FromFiles(const std::vector<std::string>& paths) {
  TrunConfig config;
  std::set<std::string> seen;
  for (const auto& path : paths) {
    char real[PATH_MAX];
    // $HOME may be the working directory: read that file once.
    if (::realpath(path.c_str(), real) && !seen.insert(real).second) continue;
    auto text = ReadFile(path);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return Status::InvalidArgument(text.status().message());
    }
    auto sections = ParseIni(*text, path);
    if (!sections.ok()) return sections.status();
    config.files_.push_back({path, std::move(*sections)});
  }
  return config;
}

std::vector<std::string> TrunConfig::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f.path);
  return out;
}

std::map<std::string, std::string> TrunConfig::Section(const std::string& name) const {
  std::map<std::string, std::string> out;
  for (const std::string& section : {name, std::string("DEFAULT")}) {
    for (const auto& f : files_) {
      for (const auto& s : f.sections) {
        if (s.name != section) continue;
        for (const auto& [k, v] : s.entries) out.emplace(k, v);  // first wins
      }
    }
  }
  return out;
}

std::optional<std::string> TrunConfig::Get(const std::string& section,
                                           const std::string& key) const {
  auto values = Section(section);
  auto it = values.find(key);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

Status TrunConfig::ApplySchedulerSection(const std::string& scheduler, const RunOpts& opts,
                                         Cfg& cfg) const {
  for (const auto& f : files_) {
    for (const auto& s : f.sections) {
      if (s.name != scheduler) continue;
      for (const auto& [k, v] : s.entries) {
        const RunOpt* opt = opts.Get(k);
        if (!opt) {
          log::Warning("{}: '{} = {}' in [{}] is not a run option of the {} scheduler; ignored",
                       f.path, k, v, scheduler, scheduler);
          continue;
        }
        if (cfg.count(opt->name)) continue;
        if (v == kNoneValue) {
          cfg[opt->name] = std::monostate{};
          continue;
        }
        auto value = RunOpts::Cast(*opt, v);
        if (!value.ok()) {
          return Status::InvalidArgument(
              fmt::format("{}: [{}] {}", f.path, scheduler, value.status().message()));
        }
        cfg[opt->name] = std::move(*value);
      }
    }
  }
  return Status::OK();
}

IniSection RunOptsSection(const std::string& scheduler, const RunOpts& opts, bool required_only) {
  IniSection section{scheduler, {}};
  for (const auto& o : opts.opts()) {
    std::string value;
    if (o.required) {
      value = fmt::format("#FIXME:({}) {}", OptTypeName(o.type), o.help);
      if (value.size() > 60) value = value.substr(0, 60) + "...";
    } else if (required_only) {
      continue;
    } else if (const auto* l = std::get_if<std::vector<std::string>>(&o.default_value)) {
      for (size_t i = 0; i < l->size(); ++i) value += (i ? ";" : "") + (*l)[i];
      if (value.empty()) value = kNoneValue;
    } else if (const auto* m = std::get_if<std::map<std::string, std::string>>(&o.default_value)) {
      for (const auto& [k, v] : *m) value += (value.empty() ? "" : ";") + k + ":" + v;
      if (value.empty()) value = kNoneValue;
    } else {
      value = CfgValueToString(o.default_value);
    }
    section.entries.emplace_back(o.name, value);
  }
  return section;
}

}  // namespace trun::specs
