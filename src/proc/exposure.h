// What other processes of the same user can see of this one: its
// environment and its memory. The agent holds the job token, its workers run
// as the same user, and a worker must not find the token (docs/design.md,
// "Threat model").
//
// Three ways a same-user process could read a variable trun was started
// with, and what closes each:
//   - a child's environment: unsetenv, so nothing trun spawns inherits it;
//   - /proc/PID/environ: the kernel shows the block execve copied onto the
//     stack, which unsetenv does not touch (glibc only drops the pointer), so
//     the bytes there are overwritten in place;
//   - /proc/PID/mem, ptrace, /proc/PID/fd: the value is still in trun's
//     memory; PR_SET_DUMPABLE 0 makes these (and environ, cmdline aside)
//     root's, refused to every other process without CAP_SYS_PTRACE.
// Root and CAP_SYS_PTRACE can still read everything: out of scope.
//
// Thread-safety: call before any other thread exists (unsetenv races with
// getenv in other threads).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace trun::proc {

// Removes every `name=...` entry from this process's environment and wipes
// its bytes in the block /proc/self/environ shows. Returns whether there was
// one.
bool ForgetEnvironmentVariable(std::string_view name);

// PR_SET_DUMPABLE 0: /proc/PID/{environ,mem,fd,maps} and ptrace are closed to
// other processes of the same user, and no core file is written. Children
// get it back at execve (the kernel resets it), so workers are unaffected.
Status MakeUndumpable();

}  // namespace trun::proc
