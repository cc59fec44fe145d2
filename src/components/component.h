// Components: functions from arguments to an AppDef, with their arguments
// parsed from a command line exactly where TorchX's argparse would parse
// them (torchx/specs/builders.py).
//
//   --name VALUE, --name=VALUE   every parameter (also --name-with-dashes)
//   -x VALUE, -xVALUE            a one-letter parameter, and declared aliases
//                                ("-cn" for config_name)
//   ARGS...                      a `*args` parameter takes the first
//                                positional argument and everything after it,
//                                options included; a leading "--" is dropped
//   list[str]                    "a,b,c" (split on ",", items trimmed)
//   dict[str, str]               "K=V,K2=V2" (TorchX's to_dict)
//   bool                         true/false (also 1/0, yes/no, on/off)
//   --help                       the component's arguments; "-h" stays free
//                                for a parameter called h
//
// A parameter without a default is required. Defaults come, strongest
// first, from the command line, the [component:NAME] section of .trunconfig
// (text, parsed like the command line; `*args` split on whitespace), and the
// component's declaration. Mistakes are reported together: an unknown
// option (with a suggestion), a value that does not parse, an option given
// twice, a missing required argument.
//
// Deliberate differences from argparse: no abbreviated options (argparse
// takes --scr for --script), a bool must be one of the words above (TorchX
// reads anything but "true" as false), and an option given twice is an error
// everywhere, not only within one "--" group.
//
// Thread-safety: Component is an immutable value once built.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "specs/app.h"
#include "specs/runopts.h"

namespace trun::components {

enum class ParamType { kStr, kInt, kFloat, kBool, kList, kDict, kVarArgs };

struct Param {
  std::string name;
  ParamType type = ParamType::kStr;
  std::string help;
  // The declared default; None (monostate) with `required` false is an
  // Optional parameter that defaults to None.
  specs::CfgValue default_value;
  bool required = false;
  // Extra spellings, e.g. "-cn".
  std::vector<std::string> aliases;
};

// The parsed arguments: one value per parameter (None when unset), plus the
// `*args` list.
class ComponentArgs {
 public:
  std::map<std::string, specs::CfgValue> values;
  std::vector<std::string> varargs;

  bool IsNone(const std::string& name) const;
  // Typed reads; the parameter must have that type.
  std::string Str(const std::string& name) const;  // "" for None
  long long Int(const std::string& name) const;
  double Float(const std::string& name) const;
  bool Bool(const std::string& name) const;
  std::vector<std::string> List(const std::string& name) const;            // {} for None
  std::map<std::string, std::string> Dict(const std::string& name) const;  // {} for None
};

struct Component {
  std::string name;     // "dist.ddp", or the file's path
  std::string summary;  // one line, for `trun builtins`
  std::string description;
  std::vector<Param> params;
  std::function<Result<specs::AppDef>(const ComponentArgs&)> build;
};

struct ParsedArgs {
  bool help = false;  // --help was given: show ComponentHelp, build nothing
  ComponentArgs args;
};

// `config_defaults` is the [component:NAME] section of .trunconfig.
Result<ParsedArgs> ParseComponentArgs(const Component& c, const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& config_defaults);

// argparse-style help: usage, description, then each argument with its
// default or "(required)".
std::string ComponentHelp(const Component& c);

// Parses the arguments and builds the AppDef, which is validated.
Result<specs::AppDef> Materialize(const Component& c, const ComponentArgs& args);

}  // namespace trun::components
