// Running a short external program to completion and capturing what it
// printed: how the slurm scheduler talks to sbatch, squeue, scontrol,
// scancel and sacct.
//
// The program gets this process's environment (with `env` replacing or
// adding variables), /dev/null as stdin, and its
// own process group; when `timeout_s` passes it is SIGKILLed (the group) and
// the result says so, with whatever it printed until then. It is not tied to
// this process's life (no parent-death signal): a submission that has
// started is left to finish if trun is killed, rather than cut in half.
//
// Thread-safety: may be called from several threads at once (Spawn's shared
// clone stack is taken under a lock).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace trun::proc {

struct CommandResult {
  int exit_code = 0;  // minus the signal number when killed by one
  bool timed_out = false;
  std::string out;
  std::string err;
};

// NotFound when argv[0] is not a program on PATH; IOError when it cannot be
// started. A program that runs and fails is a CommandResult, not an error.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s,
                                 const std::map<std::string, std::string>& env = {});

}  // namespace trun::proc
