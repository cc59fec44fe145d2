// trun's subcommand table and its dispatcher.
//
// `trun SUBCOMMAND ...` runs a named subcommand; anything else is a torchrun
// command line (`trun [flags] train.py ...`). A training script cannot be
// named like a subcommand; `trun -- NAME` forces the launcher.
//
// Thread-safety: Main() runs once per process.
#pragma once

namespace trun::cli {

int Main(int argc, char** argv);

}  // namespace trun::cli
