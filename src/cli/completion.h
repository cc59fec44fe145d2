// Shell completion scripts for trun (`trun --print-completion SHELL`).
//
// The script is generated from the tables the parsers use, so it cannot
// drift from them: the launcher's torchrun flags (launch::LaunchFlags), the
// subcommand table (commands.cc), `trun run`'s flags (RunFlags) and the
// builtin components (components::Builtins). It completes, by position: the
// first word as a subcommand, a flag or a file; flags after `trun`; a value
// (a file) after a flag that takes one; the component name after `trun run`;
// and files after the training script or the component, whose arguments
// follow.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "launch/args.h"

namespace trun::cli {

struct CompletionWords {
  std::vector<launch::LaunchFlag> launch_flags;  // every spelling
  std::vector<std::string> subcommands;          // those offered to users
  std::vector<launch::LaunchFlag> run_flags;     // `trun run`'s
  std::vector<std::string> components;           // builtin component names
};

// The script for "bash", "zsh" or "tcsh"; InvalidArgument for another shell.
Result<std::string> CompletionScript(std::string_view shell, const CompletionWords& words);

}  // namespace trun::cli
