// trun's exit codes: the one table every subcommand and the launcher use
// (docs/cli.md, "Exit codes"), and the one mapping from a Status to a code.
//
// A module returns a Status whose code says what kind of problem it is; only
// here does that become a number. A module never picks a status code for
// the exit number it would produce.
//
// Thread-safety: pure functions, plus ReportError() writing to stderr (and
// to $TRUN_ERROR_JSON).
#pragma once

#include "common/status.h"

namespace trun {

inline constexpr int kExitSuccess = 0;
// The workers or the app failed (after their restarts), the rendezvous
// failed, or a wait timed out.
inline constexpr int kExitFailed = 1;
// The user's input is wrong, nothing was started or submitted.
inline constexpr int kExitUsage = 2;
// trun could not do it (I/O, spawning, an internal error).
inline constexpr int kExitCannot = 3;
// A service trun needs (the SLURM controller) cannot be reached; nothing was
// done, so running again is safe.
inline constexpr int kExitUnavailable = 4;
// Another user's app.
inline constexpr int kExitPermission = 5;
// A handled signal ends trun with 128 + its number, as a shell reports it.
constexpr int ExitForSignal(int sig) { return 128 + sig; }

// InvalidArgument, NotFound, UnknownApp and Unsupported: 2; Timeout: 1; Unavailable: 4;
// PermissionDenied: 5; any other problem: 3.
int ExitCodeFor(const Status& s);

// The kind of problem as the error report names it: "invalid_argument",
// "not_found", "unknown_app", "unsupported", "timeout", "io_error",
// "internal", "unavailable", "permission_denied" ("ok" for OK).
const char* ErrorKindName(StatusCode code);

// The error report (docs/cli.md, "Errors as JSON"), one JSON object:
// {"kind": ErrorKindName, "exit_code": ExitCodeFor(s), "message": ...}.
std::string ErrorJson(const Status& s);

// Takes $TRUN_ERROR_JSON out of the environment, keeping its path for
// ReportError: it is the report of this trun's caller, so no process trun
// starts (a local app's supervisor, a replica's agent) may write there. Call
// first in main, before any thread starts.
void TakeErrorReportPath();

// Prints `s` with "trun: error: " before each of its lines and returns
// ExitCodeFor(s). When TakeErrorReportPath() found a file, ErrorJson(s) is
// written there too (whole, through a rename), so that a program that runs
// trun (the Python package) learns the kind of problem without reading the
// message; a file that cannot be written is a warning.
int ReportError(const Status& s);

}  // namespace trun
