// torchrun's command line (and PET_* environment) -> LaunchConfig.
//
// Every torchrun flag is accepted in its dash and underscore spellings
// (--nproc-per-node, --nproc_per_node), with PET_<DEST> as the fallback, as
// torch's argparse reads them (trun's own flags read no PET_ variable). Options end at the training
// script; everything after it is the script's. Errors are collected, --rdzv-conf's and
// --rdzv-endpoint's too (rdzv_conf.h): one message that names each problem and its fix, and the
// caller exits 2. A --rdzv-conf key that looks misspelt is a warning on
// stderr.
//
// Thread-safety: reads the process environment; call before starting threads.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "launch/config.h"

namespace trun::launch {

// What the command line asked for besides a launch.
// kPrintCompletion: --print-completion SHELL (the caller writes the script,
// which also names trun's subcommands).
enum class LaunchAction { kRun, kHelp, kPrintCompletion };

struct ParsedLaunch {
  LaunchAction action = LaunchAction::kRun;
  std::string help_text;
  LaunchConfig config;
  std::string completion_shell;  // bash, zsh or tcsh, for kPrintCompletion
};

// One spelling of a launcher flag ("--nproc-per-node", "--nproc_per_node",
// "-m"), from the table the parser is built from; for shell completion.
struct LaunchFlag {
  std::string name;
  bool takes_value = false;
};
std::vector<LaunchFlag> LaunchFlags();

// The shells --print-completion knows, as torchrun offers them.
inline constexpr const char* kCompletionShells[] = {"bash", "zsh", "tcsh"};

// `args` excludes argv[0].
Result<ParsedLaunch> ParseLaunchArgs(const std::vector<std::string>& args);

// What torchrun's agent finds only as it starts the workers, checked just
// before trun's agent starts: a --signals-to-handle signal no handler can be
// set for (SIGKILL, SIGSTOP), --virtual-local-rank without a device per
// worker, more workers than the machine can have processes. Each is a
// problem that names it; the caller exits 1, as torchrun fails there. Reads
// CUDA_VISIBLE_DEVICES and /proc/sys/kernel/pid_max.
Status CheckBeforeStart(const LaunchConfig& c);

// Parses "-r"/"-t" values as torch's pattern: "0".."3" or "i:v,i:v", nothing
// trimmed (trun also takes local ranks of several digits).
Result<StdSpec> ParseStdSpec(const std::string& flag, const std::string& value);

}  // namespace trun::launch
