// What trun says to its warm process (warm_table.h) and what it answers:
// the pure half of warm starts, unit-tested apart from any process.
//
// A request is one frame on a unix stream socket, sent with the worker's
// stdin, stdout and stderr attached as SCM_RIGHTS (in that order):
//
//   frame   := length payload           length: 4 bytes, big-endian, of payload
//   payload := "trun-warm-1" NUL parent NUL cwd NUL kind NUL target NUL
//              count NUL { arg NUL } count NUL { env NUL }
//   parent  := trun's pid, decimal: the worker runs no user code until it
//              is trun's child
//   kind    := "script" | "module" | "code"   (python FILE, -m MODULE, -c CODE)
//   arg     := sys.argv[1:], each; env := "KEY=VALUE", the whole environment
//
// Strings are bytes without NUL, as argv and environ are. The answer is one
// frame whose payload is "ok PID" (the worker's pid) or "error REASON".
//
// Before any answer, once its imports are done (or have failed: the answers
// then say why), the warm process sends one frame whose payload is
// kWarmReady, so that trun can wait for it without blocking its loop.
//
// Thread-safety: pure functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trun::proc {

// A Python command line as the warm process runs it.
struct PythonCommand {
  enum class Kind { kScript, kModule, kCode };
  Kind kind = Kind::kScript;
  std::string target;             // the script's path, the module, or the code
  std::vector<std::string> args;  // what follows it: sys.argv[1:]
};

// Reads `python [-u] FILE args`, `python [-u] -m MODULE args` and
// `python [-u] -c CODE args`; argv[0] is the interpreter. Any other option
// is refused: the warm process already runs with its own.
Result<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv);

struct WarmRequest {
  PythonCommand command;
  std::vector<std::string> env;
  std::string cwd;
  pid_t parent = 0;
};

inline constexpr std::string_view kWarmMagic = "trun-warm-1";
inline constexpr std::string_view kWarmReady = "ready";

// `payload` with its length before it.
std::string Frame(std::string_view payload);

// The whole frame, length included.
std::string EncodeRequest(const WarmRequest& request);

// The 4-byte length that starts a frame.
uint32_t DecodeFrameLength(const char header[4]);

// The worker's pid from an answer's payload, or the warm process's reason.
Result<pid_t> DecodeReply(std::string_view payload);

}  // namespace trun::proc
