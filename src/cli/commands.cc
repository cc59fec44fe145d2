#include "cli/commands.h"

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "cli/store_command.h"
#include "common/log.h"
#include "common/strings.h"
#include "launch/args.h"

namespace trun::cli {
namespace {

using Args = std::vector<std::string>;

int Launch(const Args& args) {
  auto parsed = launch::ParseLaunchArgs(args);
  if (!parsed.ok()) {
    for (const auto& line : Split(parsed.status().message(), '\n')) log::Error("{}", line);
    return agent::kExitUsage;
  }
  if (parsed->action == launch::LaunchAction::kHelp) {
    std::fputs(parsed->help_text.c_str(), stdout);
    return 0;
  }
  agent::LocalAgent agent(std::move(parsed->config));
  return agent.Run();
}

int Version(const Args&) {
  std::puts("trun " TRUN_VERSION);
  return 0;
}

struct Command {
  const char* name;
  const char* help;
  int (*run)(const Args&);
};

// The one table of subcommands. The launcher is the default, not a row.
constexpr Command kCommands[] = {
    {"store", "run a standalone TCPStore-compatible key-value server", RunStoreCommand},
    {"version", "print trun's version", Version},
};

}  // namespace

int Main(int argc, char** argv) {
  Args args(argv + 1, argv + argc);
  if (!args.empty()) {
    if (args[0] == "--version") return Version({});
    for (const auto& c : kCommands) {
      if (args[0] == c.name) return c.run(Args(args.begin() + 1, args.end()));
    }
  }
  return Launch(args);
}

}  // namespace trun::cli
