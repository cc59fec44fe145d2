#include "cli/flags.h"

#include <fmt/format.h>

#include "common/log.h"
#include "common/strings.h"

namespace trun::cli {

Result<Flags> ParseFlags(std::string_view command, const std::vector<Flag>& flags,
                         const std::vector<std::string>& args, bool stop_at_positional) {
  Flags out;
  std::vector<std::string> problems;
  std::vector<std::string> spellings;
  for (const auto& f : flags) spellings.insert(spellings.end(), f.names.begin(), f.names.end());
  auto find = [&](const std::string& name) -> const Flag* {
    for (const auto& f : flags) {
      for (const auto& n : f.names) {
        if (n == name) return &f;
      }
    }
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.positionals.insert(out.positionals.end(), args.begin() + static_cast<long>(i) + 1,
                             args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      if (stop_at_positional) {
        out.positionals.insert(out.positionals.end(), args.begin() + static_cast<long>(i),
                               args.end());
        break;
      }
      out.positionals.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool has_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    const Flag* f = find(name);
    if (!f) {
      std::string guess = ClosestMatch(name, spellings);
      problems.push_back(
          fmt::format("{}: unknown option '{}'{}", command, name,
                      guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
      continue;
    }
    if (f->takes_value && !has_value) {
      if (i + 1 >= args.size()) {
        problems.push_back(fmt::format("{}: {} needs a value", command, name));
        continue;
      }
      value = args[++i];
    } else if (!f->takes_value && has_value) {
      problems.push_back(fmt::format("{}: {} takes no value", command, name));
      continue;
    }
    if (out.values.count(f->names[0])) {
      problems.push_back(fmt::format("{}: {} is given more than once", command, name));
      continue;
    }
    out.values[f->names[0]] = value;
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "\n") + p;
    return Status::InvalidArgument(all + fmt::format("\nsee `trun {} --help`", command));
  }
  return out;
}

}  // namespace trun::cli
