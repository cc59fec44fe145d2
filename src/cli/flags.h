// A small option parser for the job subcommands (status, log, run, ...):
// `--name VALUE`, `--name=VALUE`, `-x VALUE`, flags without a value, "--"
// ending the options; unknown options get a suggestion, an option given
// twice is an error. (The launcher's torchrun flags are launch/args.h's.)
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::cli {

// A subcommand's arguments, after its name.
using Args = std::vector<std::string>;

struct Flag {
  std::vector<std::string> names;  // names[0] is the key in Flags::values
  bool takes_value = false;
};

struct Flags {
  std::map<std::string, std::string> values;  // "" for a flag without value
  std::vector<std::string> positionals;
  bool Has(const std::string& name) const { return values.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
};

// With `stop_at_positional`, the first positional and everything after it
// (options too) are left, in order, in `positionals`.
Result<Flags> ParseFlags(std::string_view command, const std::vector<Flag>& flags,
                         const std::vector<std::string>& args, bool stop_at_positional = false);

}  // namespace trun::cli
