// TorchX's macros: placeholders in a role that the scheduler fills in per
// replica, when it knows the values.
//
//   ${img_root}    where the role's image is on the host
//   ${app_id}      the id the scheduler gave the app
//   ${replica_id}  the replica's index in its role (0, 1, ...), kept by a
//                  replacement replica
//   ${rank0_env}   the NAME of an environment variable that holds the first
//                  replica's host; the app expands it (dist.ddp runs
//                  `${TORCHX_RANK0_HOST:=localhost}` through a shell)
//
// Substitution follows Python's string.Template.safe_substitute: `$name` and
// `${name}` are replaced when `name` is one of the above, anything else
// (unknown names, a lone `$`) is left as it is, and `$$` becomes `$`. Only
// args, env values and strings inside metadata are substituted, never the
// entrypoint, the image or other fields.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "specs/app.h"

namespace trun::specs {

inline constexpr std::string_view kMacroImgRoot = "${img_root}";
inline constexpr std::string_view kMacroAppId = "${app_id}";
inline constexpr std::string_view kMacroReplicaId = "${replica_id}";
inline constexpr std::string_view kMacroRank0Env = "${rank0_env}";

struct MacroValues {
  std::string img_root;
  std::string app_id;
  std::string replica_id;
  std::string rank0_env;

  // A copy of `role` with args, env values and metadata strings substituted.
  Role Apply(const Role& role) const;
  std::string Substitute(std::string_view text) const;
};

// string.Template.safe_substitute over `values`: identifiers are
// [_A-Za-z][_A-Za-z0-9]*; an unknown or malformed placeholder stays as is.
// `keep_escapes` leaves "$$" as it is, for a later pass to turn into "$".
std::string SafeSubstitute(std::string_view text, const std::map<std::string, std::string>& values,
                           bool keep_escapes = false);

}  // namespace trun::specs
