// The builtin components, TorchX's set with trun in place of torchrun:
//
//   dist.ddp      one role of N replicas, each running `trun` (this very
//                 binary, by absolute path) with torchrun's flags; -j
//                 [MIN:]MAX x NPROC; c10d rendezvous on the first replica's
//                 host (${rank0_env}, expanded by bash) at --rdzv_port
//   dist.spmd     dist.ddp with the workers per node taken from the named
//                 resource's GPUs (-j 2 on gpu.small is -j 2x1)
//   dist.torchrun TorchX's newer name: dist.ddp, except that with a named
//                 resource (-h) a bare -j counts nodes of one worker per GPU
//   utils.echo, utils.touch, utils.sh, utils.python, utils.binary,
//   utils.copy    small programs, for tutorials and glue
//
// Their parameters, defaults and the AppDefs they build are TorchX's
// (torchx/components/dist.py and utils.py), except where trun's world
// differs: dist.ddp runs trun instead of torchrun (and, for the static
// backend, also gives --master_addr/--master_port, which is how trun's
// launcher finds node 0); utils.python runs python3, since Debian and Ubuntu
// ship no `python`; utils.copy copies with a small Python program (fsspec
// URLs when fsspec is installed, local paths otherwise) instead of
// torchx.apps.utils.copy_main; default names say trun, not torchx.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "components/component.h"

namespace trun::components {

// The image a builtin names when none is given. The local scheduler ignores
// images; remote schedulers need one with trun and the job's Python.
std::string DefaultImage();

// `-j`: "[MIN:]MAX x NPROC" ("2x4", "1:3x8") or "NPROC" (one node). Each
// count is at most kMaxJ: a larger one is a typo, and every node is a
// replica that the scheduler is asked for (and the local one starts).
inline constexpr int kMaxJ = 100000;
struct JSpec {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  std::string nnodes;  // what --nnodes receives: "MIN:MAX" or "N"
};
Result<JSpec> ParseJ(std::string_view j);

// Every builtin, sorted by name. The dist.* components run `trun_path`.
std::vector<Component> Builtins(const std::string& trun_path);

// A builtin by name, or a component file (a path to .yaml, .yml or .json;
// see file_component.h). An unknown name gets a suggestion.
Result<Component> FindComponent(const std::string& name, const std::string& trun_path);

}  // namespace trun::components
