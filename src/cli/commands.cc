#include "cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "cli/app_commands.h"
#include "cli/completion.h"
#include "cli/run_command.h"
#include "cli/store_command.h"
#include "common/exit_code.h"
#include "common/log.h"
#include "common/strings.h"
#include "components/builtins.h"
#include "launch/args.h"
#include "launch/config_json.h"
#include "launch/numa_binding.h"
#include "proc/exposure.h"
#include "schedulers/scheduler.h"
#include "schedulers/slurm_stacks.h"

namespace trun::cli {
namespace {

int PrintCompletion(const std::string& shell);

int Launch(const Args& args) {
  auto parsed = launch::ParseLaunchArgs(args);
  if (!parsed.ok()) return ReportError(parsed.status());
  if (parsed->action == launch::LaunchAction::kHelp) {
    std::fputs(parsed->help_text.c_str(), stdout);
    return 0;
  }
  if (parsed->action == launch::LaunchAction::kPrintCompletion) {
    return PrintCompletion(parsed->completion_shell);
  }
  // TRUN_DRY_RUN=1: the decision for this command line, as JSON, and nothing
  // started (docs/cli.md#dry-run).
  if (const char* dry = std::getenv("TRUN_DRY_RUN"); dry && std::string_view(dry) == "1") {
    std::puts(launch::LaunchConfigJson(parsed->config).c_str());
    return 0;
  }
  // The agent keeps the job token to itself: its workers run as the same
  // user and must not find it in the environment they inherit, in
  // /proc/PPID/environ or in the agent's memory (proc/exposure.h). Parsing
  // has read it; no thread exists yet.
  proc::ForgetEnvironmentVariable(schedulers::kJobTokenEnv);
  if (!parsed->config.rdzv.job_token.empty()) {
    if (Status s = proc::MakeUndumpable(); !s.ok()) log::Warning("{}", s.message());
  }
  // What torchrun's agent finds as it starts the workers fails here (exit 1).
  if (Status s = launch::CheckBeforeStart(parsed->config); !s.ok()) {
    for (const auto& line : Split(s.message(), '\n')) log::Error("{}", line);
    return kExitFailed;
  }
  // torchrun's agent binds as it starts the workers, and fails there (exit 1).
  if (Status s = launch::BindWorkersToNuma(parsed->config); !s.ok()) {
    log::Error("{}", s.message());
    return kExitFailed;
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
  const char* help;  // null: internal, not offered to users
  int (*run)(const Args&);
};

// The one table of subcommands. The launcher is the default, not a row.
constexpr Command kCommands[] = {
    {"store", "run a standalone TCPStore-compatible key-value server", RunStoreCommand},
    {"version", "print trun's version", Version},
    {"run", "run a component (dist.ddp, utils.sh, a YAML file) on a scheduler", RunCommand},
    {"status", "the state of a submitted app", StatusCommand},
    {"log", "the logs of an app's replicas", LogCommand},
    {"stack", "every worker's Python stack, of an app or a launcher job", StackCommand},
    {"cancel", "stop a submitted app", CancelCommand},
    {"delete", "cancel an app and remove it from its scheduler", DeleteCommand},
    {"list", "the apps a scheduler knows", ListCommand},
    {"describe", "the AppDef an app was submitted with", DescribeCommand},
    {"builtins", "the builtin components", BuiltinsCommand},
    {"runopts", "the run options of the schedulers", RunoptsCommand},
    {"configure", "write a .trunconfig", ConfigureCommand},
    {"local-supervisor", nullptr, LocalSupervisorCommand},
    {schedulers::slurm::kStackSubcommand, nullptr, SlurmStackCommand},
};

// The completion script, from the same tables the parsers use.
int PrintCompletion(const std::string& shell) {
  CompletionWords words;
  words.launch_flags = launch::LaunchFlags();
  words.launch_flags.push_back({"--version", false});
  for (const auto& c : kCommands) {
    if (c.help) words.subcommands.push_back(c.name);
  }
  for (const auto& f : RunFlags()) {
    for (const auto& name : f.names) words.run_flags.push_back({name, f.takes_value});
  }
  // Only the names are used; the path dist.ddp would run does not matter.
  for (const auto& c : components::Builtins("trun")) words.components.push_back(c.name);
  auto script = CompletionScript(shell, words);
  if (!script.ok()) return ReportError(script.status());
  std::fputs(script->c_str(), stdout);
  return 0;
}

// A first word that is neither a subcommand nor a file, but close to a
// subcommand's name, is a typo: `trun stauts` must not try to launch a
// script called "stauts".
std::string MistypedSubcommand(const std::string& word) {
  if (word.empty() || word[0] == '-' || word.find_first_of("./") != std::string::npos ||
      ::access(word.c_str(), F_OK) == 0) {
    return "";
  }
  std::vector<std::string> names;
  for (const auto& c : kCommands) {
    if (c.help) names.push_back(c.name);
  }
  return ClosestMatch(word, names);
}

}  // namespace

int Main(int argc, char** argv) {
  TakeErrorReportPath();
  Args args(argv + 1, argv + argc);
  if (!args.empty()) {
    if (args[0] == "--version") return Version({});
    for (const auto& c : kCommands) {
      if (args[0] == c.name) return c.run(Args(args.begin() + 1, args.end()));
    }
    std::string guess = MistypedSubcommand(args[0]);
    if (!guess.empty()) {
      return ReportError(Status::InvalidArgument(
          fmt::format("'{}' is neither a trun subcommand nor a file (did you mean 'trun {}'?)",
                      args[0], guess)));
    }
  }
  return Launch(args);
}

}  // namespace trun::cli
