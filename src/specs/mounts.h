// Mounts in TorchX's string form, a Docker-like list of options:
//
//   type=bind,src=/host,dst=/job[,readonly]
//   type=volume,src=NAME,dst=/job[,readonly]
//   type=device,src=/dev/fuse[,dst=/dev/fuse][,perm=rw]
//
// Several mounts go in one list; each starts with `type=`. Keys have
// aliases: source for src; destination and target for dst; read_only for
// readonly (a flag: present means true). `~` at the start of a bind source
// is the home directory. A device's dst defaults to its src and its
// permissions to "rwm".
//
// Thread-safety: pure functions (reads $HOME).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "specs/app.h"

namespace trun::specs {

// `options` are the comma-split tokens ("type=bind", "src=/a", ...), as
// component arguments deliver a list.
Result<std::vector<Mount>> ParseMounts(const std::vector<std::string>& options);

// The inverse: one "type=...,src=...,dst=..." string per mount.
std::string FormatMount(const Mount& m);

}  // namespace trun::specs
