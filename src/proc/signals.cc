#include "proc/signals.h"

#include <signal.h>

#include <string>

#include "common/strings.h"

namespace trun::proc {
namespace {

struct Named {
  int sig;
  const char* name;
};

constexpr Named kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
};

}  // namespace

std::string SignalName(int sig) {
  for (const auto& s : kSignals) {
    if (s.sig == sig) return s.name;
  }
  return "SIG" + std::to_string(sig);
}

std::optional<int> ParseSignal(std::string_view name) {
  name = Trim(name);
  if (auto n = ParseInt(name)) {
    if (*n > 0 && *n < NSIG) return static_cast<int>(*n);
    return std::nullopt;
  }
  std::string full = name.rfind("SIG", 0) == 0 ? std::string(name) : "SIG" + std::string(name);
  for (const auto& s : kSignals) {
    if (full == s.name) return s.sig;
  }
  return std::nullopt;
}

}  // namespace trun::proc
