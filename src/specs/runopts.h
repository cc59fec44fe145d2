// Scheduler run options ("runopts") and the run config ("cfg") a user gives
// with `-cfg k=v,...` or in .trunconfig.
//
// Each scheduler declares its options with a type, a default, whether it is
// required, and help. Values arrive as text and are cast by TorchX's rules
// (torchx/specs/api.py runopt.cast_to_type):
//
//   str        as is
//   int/float  a decimal number
//   bool       true/1/yes/on or false/0/no/off, any case
//   list[str]  "a,b" or "a;b" (empty items dropped)
//   dict[str, str]  "k:v,k2:v2" or with ";" (":" because "=" separates options)
//
// `-cfg` text is split by TorchX's to_dict: pairs are split on "=", and the
// LAST "," or ";" before a key separates pairs, so list values need no
// quoting: "FOO=v1,v2,BAR=v3" is {FOO: "v1,v2", BAR: "v3"}. Values may be
// quoted ('...' or "...") to hold "=", "," or ";".
//
// Unlike TorchX, an unknown option or a value that does not cast is an error
// (TorchX warns and drops it): a typo in -cfg must not be silently ignored.
//
// Thread-safety: values and pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace trun::specs {

enum class OptType { kStr, kInt, kFloat, kBool, kListStr, kDictStr };
std::string_view OptTypeName(OptType t);  // "str", "int", ..., "list[str]", "dict[str, str]"

// None (monostate) or a value of one of the option types.
using CfgValue = std::variant<std::monostate, std::string, long long, double, bool,
                              std::vector<std::string>, std::map<std::string, std::string>>;
using Cfg = std::map<std::string, CfgValue>;

// As Python's str() writes the value: None, True, 3, 'a' in lists, ...
std::string CfgValueToString(const CfgValue& v);

struct RunOpt {
  std::string name;
  OptType type = OptType::kStr;
  CfgValue default_value;
  bool required = false;
  std::string help;
};

class RunOpts {
 public:
  void Add(std::string name, OptType type, std::string help, CfgValue default_value = {},
           bool required = false);

  // The option called `name`, also under its camelCase spelling
  // ("logDir" finds "log_dir"); null when there is none.
  const RunOpt* Get(std::string_view name) const;
  const std::vector<RunOpt>& opts() const { return opts_; }
  std::vector<std::string> Names() const;

  // Casts `text` to the option's type.
  static Result<CfgValue> Cast(const RunOpt& opt, std::string_view text);

  // Parses `-cfg` text into typed values; every unknown key and bad value
  // is reported at once, naming `scheduler` and the known options.
  Result<Cfg> CfgFromStr(std::string_view text, std::string_view scheduler) const;

  // Fills defaults; a missing required option or a value of the wrong type
  // is an error (all of them at once).
  Result<Cfg> Resolve(const Cfg& cfg, std::string_view scheduler) const;

  // TorchX's runopts repr: a usage line, then the required and optional
  // options with type, default and help.
  std::string Format() const;

 private:
  std::vector<RunOpt> opts_;
};

// TorchX's to_dict: "k=v,k2=v2" to ordered pairs (see above).
Result<std::vector<std::pair<std::string, std::string>>> ToDict(std::string_view arg);

// TorchX's to_list: "a, b" to {"a", "b"}; "" to {}.
std::vector<std::string> ToList(std::string_view arg);

}  // namespace trun::specs
