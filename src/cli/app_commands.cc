// The subcommands that ask about submitted apps (status, log, stack, cancel,
// delete, list, describe) and about what there is (builtins, runopts, configure).
#include "cli/app_commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <regex>
#include <thread>

#include "agent/job_stacks.h"
#include "agent/stacks.h"
#include "cli/app_helpers.h"
#include "cli/flags.h"
#include "common/exit_code.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "components/builtins.h"
#include "components/file_component.h"
#include "schedulers/local_scheduler.h"
#include "schedulers/local_supervisor.h"
#include "schedulers/slurm_stacks.h"
#include "specs/config.h"
#include "specs/named_resources.h"
#include "specs/serialize.h"

namespace trun::cli {
namespace {

const Flag kHelp = {{"--help", "-h"}, false};

int Usage(const char* text) {
  std::fputs(text, stdout);
  return 0;
}

// The one positional a command needs, else a usage error.
Result<std::string> OnePositional(const char* command, const Flags& f, const char* what) {
  if (f.positionals.size() == 1) return f.positionals[0];
  if (f.positionals.empty()) {
    return Status::InvalidArgument(fmt::format("{}: missing {}", command, what));
  }
  std::string extra;
  for (size_t i = 1; i < f.positionals.size(); ++i) extra += " " + f.positionals[i];
  return Status::InvalidArgument(fmt::format("{}: unexpected arguments:{}", command, extra));
}

// The app whose handle is the command's one positional argument.
Result<OpenedApp> OpenHandleArg(const char* command, const Flags& f) {
  auto handle = OnePositional(command, f, "the app handle, SCHEDULER://SESSION/APP_ID");
  if (!handle.ok()) return handle.status();
  return OpenApp(*handle);
}

void Print(const std::string& s) { std::fputs(s.c_str(), stdout); }

// A simple table, as Python's tabulate prints one.
std::string Table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) width[i] = headers[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string c = cells[i];
      if (i + 1 < cells.size()) c.resize(width[i], ' ');
      s += (i ? "  " : "") + c;
    }
    return s + "\n";
  };
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  std::string out = line(headers) + line(rule);
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace

int StatusCommand(const Args& args) {
  auto f = ParseFlags("status", {kHelp, {{"--json"}, false}, {{"--roles"}, true}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun status [--json] [--roles ROLE,...] HANDLE\n\n"
        "The app's state, restarts, and each replica's state with its error file's message.\n"
        "  --json        TorchX's AppStatus.to_json() as one line\n"
        "  --roles A,B   only these roles\n");
  }
  auto app = OpenHandleArg("status", *f);
  if (!app.ok()) return ReportError(app.status());
  auto d = app->scheduler->Describe(app->handle.app_id);
  if (!d.ok()) return ReportError(d.status());
  std::vector<std::string> roles;
  if (f->Has("--roles")) roles = Split(f->Get("--roles"), ',');
  specs::AppStatus st = d->ToAppStatus();
  Print(f->Has("--json") ? st.ToJson(roles).dump() + "\n" : st.Format(roles) + "\n");
  return 0;
}

// The most of a whole job's stacks `trun stack` reads from one agent: a
// node's most (agent/job_stacks.h) for each of a few hundred nodes.
constexpr size_t kMaxJobStacksBytes = size_t{1} << 30;

int StackCommand(const Args& args) {
  auto f = ParseFlags("stack", {kHelp, {{"--json"}, false}, {{"--health"}, true}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun stack [--json] HANDLE\n"
        "       trun stack [--json] --health HOST:PORT[,HOST:PORT...]\n\n"
        "Every worker's Python stack, all threads, read from outside the workers (nothing\n"
        "they can observe), labelled with rank, local rank, host, pid, state and CPU time.\n"
        "  HANDLE            a running app of trun run (local: read on this host; slurm:\n"
        "                    by a job step of srun on each of the job's nodes)\n"
        "  --health ADDRS    a launcher job: the health server of one of its agents\n"
        "                    (--health-check-port), which gathers every node's stacks\n"
        "                    from the other agents of its round; several addresses: those\n"
        "                    agents' own workers only, asked all at once. With the job\n"
        "                    token of TRUN_JOB_TOKEN where the job has one\n"
        "  --json            the documents (docs/events.md, \"Stacks\"), a JSON array\n");
  }
  std::vector<nlohmann::json> nodes;
  std::vector<std::string> unanswered;  // why each node that gave nothing gave nothing
  if (f->Has("--health")) {
    if (!f->positionals.empty()) {
      return ReportError(Status::InvalidArgument(
          "stack: give either an app handle or --health HOST:PORT,..., not both"));
    }
    const char* token = std::getenv("TRUN_JOB_TOKEN");
    const std::vector<std::string> addresses = Split(f->Get("--health"), ',');
    // One agent answers for the whole job within its budget for the peers
    // (agent/job_stacks.h); the wait here only has to cover that.
    const bool whole_job = addresses.size() == 1;
    std::vector<std::future<Result<nlohmann::json>>> asked;
    for (const auto& address : addresses) {
      asked.push_back(std::async(std::launch::async, [address, token, whole_job] {
        return agent::FetchStacks(
            address, token ? token : "",
            whole_job ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(2000),
            whole_job ? "job" : "", whole_job ? kMaxJobStacksBytes : agent::kMaxNodeStacksBytes);
      }));
    }
    for (size_t i = 0; i < asked.size(); ++i) {
      auto doc = asked[i].get();
      const std::string& address = addresses[i];
      if (!doc.ok()) {
        unanswered.push_back(doc.status().message());
        continue;
      }
      if (!doc->is_array()) {
        if (!agent::IsNodeDocument(*doc)) {
          unanswered.push_back(
              fmt::format("{}: /stacks answered something other than a node's "
                          "stacks: is it a trun agent's health server?",
                          address));
          continue;
        }
        nodes.push_back(std::move(*doc));
        continue;
      }
      for (auto& node : *doc) {
        if (!agent::IsNodeDocument(node)) {
          unanswered.push_back(
              fmt::format("{}: an element of its /stacks answer is not a node's "
                          "stacks: is it a trun agent's health server?",
                          address));
          continue;
        }
        // A node the agent could not ask keeps its place in --json, and
        // counts as one we could not ask ourselves.
        if (auto why = node.find("error"); why != node.end() && why->is_string()) {
          const auto address = node.find("address");
          unanswered.push_back(fmt::format(
              "node {} ({}): {}", node.value("node_rank", nlohmann::json()).dump(),
              address != node.end() && address->is_string() ? address->get<std::string>()
                                                            : "no health server",
              why->get<std::string>()));
        }
        nodes.push_back(std::move(node));
      }
    }
  } else {
    auto handle = OnePositional("stack", *f, "the app handle, SCHEDULER://SESSION/APP_ID");
    if (!handle.ok()) return ReportError(handle.status());
    auto app = OpenApp(*handle);
    if (!app.ok()) return ReportError(app.status());
    auto answer = app->scheduler->Stacks(app->handle.app_id);
    if (!answer.ok()) return ReportError(answer.status());
    nodes = std::move(answer->nodes);
    // An app's replicas are asked in replica order, which is not the
    // order of their ranks; a launcher job's answer above is already in
    // node-rank order, its unanswered nodes in their places.
    agent::OrderNodesByRank(nodes);
    unanswered = std::move(answer->unanswered);
  }
  // The nodes that answered are shown all the same: a node that cannot be
  // asked is often the one stuck.
  for (const auto& why : unanswered) log::Error("{}", why);
  if (!nodes.empty() || unanswered.empty()) {
    Print(f->Has("--json") ? nlohmann::json(nodes).dump() + "\n" : agent::FormatStacks(nodes));
  }
  return unanswered.empty() ? kExitSuccess : kExitFailed;
}

int SlurmStackCommand(const Args& args) {
  if (args.size() != 1) {
    return ReportError(Status::InvalidArgument(
        fmt::format("{}: expected JOBID; `trun stack slurm://SESSION/JOBID` runs it on the job's "
                    "nodes, not you",
                    schedulers::slurm::kStackSubcommand)));
  }
  auto doc = schedulers::slurm::ReadNodeStacks(args[0]);
  if (!doc.ok()) return ReportError(doc.status());
  Print(doc->dump() + "\n");
  return 0;
}

int LogCommand(const Args& args) {
  auto f = ParseFlags(
      "log", {kHelp, {{"--regex"}, true}, {{"--tail", "-t"}, false}, {{"--streams"}, true}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun log [--regex REGEX] [-t|--tail] [--streams stdout|stderr|combined]\n"
        "                SCHEDULER://[SESSION]/APP_ID[/ROLE[/REPLICA_ID,...]]\n\n"
        "Prints replicas' logs, each line prefixed ROLE/REPLICA_ID.\n"
        "  --regex REGEX  only lines that match\n"
        "  -t, --tail     follow the logs until the app ends\n"
        "  --streams S    which stream (default combined: stdout and stderr, whole lines)\n");
  }
  auto id = OnePositional("log", *f, "the app handle, SCHEDULER://SESSION/APP_ID[/ROLE[/IDS]]");
  if (!id.ok()) return ReportError(id.status());
  static const std::regex kId(R"(^(\w+)://([^/]*)/([^/]+)(/([^/]+)(/((\d+,?)+))?)?$)");
  std::smatch m;
  if (!std::regex_match(*id, m, kId)) {
    return ReportError(Status::InvalidArgument(fmt::format(
        "log: '{}' is not of the form SCHEDULER://[SESSION]/APP_ID[/ROLE[/REPLICA_IDS,...]]",
        *id)));
  }
  schedulers::LogOptions options;
  options.tail = f->Has("--tail");
  options.regex = f->Get("--regex");
  if (f->Has("--streams")) {
    options.streams = schedulers::ParseLogStream(f->Get("--streams"));
    if (!options.streams) {
      return ReportError(Status::InvalidArgument(fmt::format(
          "log: --streams: expected stdout, stderr or combined, got '{}'", f->Get("--streams"))));
    }
  }
  const std::string handle = fmt::format("{}://{}/{}", m.str(1), m.str(2), m.str(3));
  auto app = OpenApp(handle);
  if (!app.ok()) return ReportError(app.status());
  schedulers::Scheduler& s = *app->scheduler;
  const std::string app_id = m.str(3), role = m.str(5);
  std::vector<std::pair<std::string, int>> replicas;
  if (m[7].matched) {
    for (const auto& x : Split(m.str(7), ',')) {
      if (!x.empty()) replicas.emplace_back(role, static_cast<int>(*ParseInt(x)));
    }
  } else {
    auto d = s.Describe(app_id);
    if (!d.ok()) return ReportError(d.status());
    replicas = ReplicasOf(*d, role);
    if (replicas.empty()) {
      std::string roles;
      for (const auto& rs : d->roles_statuses) roles += (roles.empty() ? "" : ", ") + rs.role;
      return ReportError(Status::InvalidArgument(
          fmt::format("log: app {} has no role '{}'; its roles are {}", app_id, role, roles)));
    }
  }
  Status st = FollowLogs(s, app_id, replicas, options, 1);
  if (!st.ok()) return ReportError(st);
  return 0;
}

int CancelCommand(const Args& args) {
  auto f = ParseFlags("cancel", {kHelp}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun cancel HANDLE\n\n"
        "Stops every replica (SIGTERM to its process group, SIGKILL after the scheduler's stop\n"
        "timeout) and records the app CANCELLED. An app that has ended is left as it is.\n");
  }
  auto app = OpenHandleArg("cancel", *f);
  if (!app.ok()) return ReportError(app.status());
  Status s = app->scheduler->Cancel(app->handle.app_id);
  if (!s.ok()) return ReportError(s);
  auto d = app->scheduler->Describe(app->handle.app_id);
  if (d.ok()) log::Info("{}: {}", app->handle.ToString(), specs::AppStateName(d->state));
  return 0;
}

int DeleteCommand(const Args& args) {
  auto f = ParseFlags("delete", {kHelp}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun delete HANDLE\n\n"
        "TorchX's delete: cancels the app if it runs, then removes it from the scheduler.\n"
        "local: its directory (state, request, logs) goes, and the app is no longer known.\n"
        "slurm: as cancel (SLURM keeps its own records). kubernetes: as cancel for now.\n");
  }
  auto app = OpenHandleArg("delete", *f);
  if (!app.ok()) return ReportError(app.status());
  Status s = app->scheduler->Delete(app->handle.app_id);
  if (!s.ok()) return ReportError(s);
  log::Info("{}: deleted", app->handle.ToString());
  return 0;
}

int ListCommand(const Args& args) {
  auto f = ParseFlags("list",
                      {kHelp,
                       {{"--scheduler", "-s"}, true},
                       {{"--scheduler_args", "-cfg", "--scheduler-args"}, true},
                       {{"--json"}, false}},
                      args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun list [-s SCHEDULER] [-cfg K=V,...] [--json]\n\n"
        "The apps the scheduler knows, oldest first (default scheduler: [cli:list] scheduler\n"
        "in .trunconfig, else local). --json: one list of {app_id, app_handle, name, state}\n"
        "(TorchX's ListAppResponse).\n");
  }
  if (!f->positionals.empty()) {
    return ReportError(
        Status::InvalidArgument("list: unexpected argument '" + f->positionals[0] + "'"));
  }
  auto config = specs::TrunConfig::Load();
  if (!config.ok()) return ReportError(config.status());
  const std::string name =
      f->Get("--scheduler", config->Get("cli:list", "scheduler").value_or("local"));
  auto s = schedulers::CreateScheduler(name, std::string(schedulers::kDefaultSession));
  if (!s.ok()) return ReportError(s.status());
  auto cfg = (*s)->RunOpts().CfgFromStr(f->Get("--scheduler_args"), name);
  if (!cfg.ok()) return ReportError(cfg.status());
  auto apps = (*s)->List();
  if (!apps.ok()) return ReportError(apps.status());
  std::vector<std::vector<std::string>> rows;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const auto& a : *apps) {
    rows.push_back({a.app_handle, a.name, std::string(specs::AppStateName(a.state))});
    all.push_back({{"app_id", a.app_id},
                   {"app_handle", a.app_handle},
                   {"name", a.name},
                   {"state", std::string(specs::AppStateName(a.state))}});
  }
  Print(f->Has("--json") ? all.dump() + "\n"
                         : Table({"APP HANDLE", "APP NAME", "APP STATUS"}, rows));
  return 0;
}

int DescribeCommand(const Args& args) {
  auto f = ParseFlags("describe", {kHelp, {{"--json"}, false}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun describe [--json] HANDLE\n\n"
        "The AppDef the app was submitted with, as YAML (or JSON).\n");
  }
  auto app = OpenHandleArg("describe", *f);
  if (!app.ok()) return ReportError(app.status());
  auto d = app->scheduler->Describe(app->handle.app_id);
  if (!d.ok()) return ReportError(d.status());
  specs::AppDef def{d->name, d->roles, {}};
  Print(f->Has("--json") ? specs::ToJson(def).dump(2) + "\n" : specs::AppDefToYaml(def));
  return 0;
}

int BuiltinsCommand(const Args& args) {
  auto f =
      ParseFlags("builtins",
                 {kHelp, {{"--print"}, true}, {{"--resources"}, false}, {{"--json"}, false}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun builtins [--print NAME] [--resources [--json]]\n\n"
        "Lists the builtin components.\n"
        "  --print NAME   the component's arguments (as `trun run NAME --help`)\n"
        "  --resources    the named resources for -h (cpu/gpu/memMB)\n"
        "  --json         with --resources: {NAME: resource} as JSON (what trun.specs reads)\n");
  }
  if (!f->positionals.empty()) {
    return ReportError(
        Status::InvalidArgument("builtins: unexpected argument '" + f->positionals[0] + "'"));
  }
  const std::string trun = SelfExecutable();
  if (f->Has("--print")) {
    auto c = components::FindComponent(f->Get("--print"), trun);
    if (!c.ok()) return ReportError(c.status());
    Print(components::ComponentHelp(*c));
    return 0;
  }
  if (f->Has("--resources")) {
    auto names = specs::NamedResourceNames();
    if (!names.ok()) return ReportError(names.status());
    std::vector<std::vector<std::string>> rows;
    nlohmann::ordered_json all = nlohmann::ordered_json::object();
    for (const auto& n : *names) {
      auto r = specs::NamedResource(n);
      if (!r.ok()) return ReportError(r.status());
      all[n] = specs::ToJson(*r);
      std::string devices;
      for (const auto& [k, v] : r->devices)
        devices += (devices.empty() ? "" : ",") + fmt::format("{}={}", k, v);
      rows.push_back(
          {n, std::to_string(r->cpu), std::to_string(r->gpu), std::to_string(r->mem_mb), devices});
    }
    Print(f->Has("--json") ? all.dump() + "\n"
                           : Table({"NAME", "CPU", "GPU", "MEMMB", "DEVICES"}, rows));
    return 0;
  }
  auto all = components::Builtins(trun);
  std::string out = fmt::format("Found {} builtin components:\n", all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    out += fmt::format(" {:2d}. {:<14} {}\n", i + 1, all[i].name, all[i].summary);
  }
  Print(out);
  return 0;
}

int RunoptsCommand(const Args& args) {
  auto f = ParseFlags("runopts", {kHelp, {{"--json"}, false}}, args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun runopts [--json] [SCHEDULER]\n\n"
        "The run options of each scheduler (or one): give them with `trun run -cfg K=V,...` or\n"
        "in .trunconfig.\n"
        "  --json  one object: each scheduler's options as a list of {name, type, default,\n"
        "          required, help} (what trun's Python package reads)\n");
  }
  if (f->positionals.size() > 1) {
    return ReportError(Status::InvalidArgument("runopts: give at most one scheduler"));
  }
  std::string only = f->positionals.empty() ? "" : f->positionals[0];
  if (!only.empty()) {
    auto s = schedulers::CreateScheduler(only, std::string(schedulers::kDefaultSession));
    if (!s.ok()) return ReportError(s.status());
    only = (*s)->name();  // local_cwd is local
  }
  std::string out;
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& info : schedulers::Schedulers()) {
    if (!only.empty() && only != info.name) continue;
    if (!info.create) {
      doc[info.name] = nullptr;
      out += fmt::format("{}:\n    not available yet\n\n", info.name);
      continue;
    }
    const specs::RunOpts opts = info.create(std::string(schedulers::kDefaultSession))->RunOpts();
    auto& list = doc[info.name] = nlohmann::ordered_json::array();
    for (const auto& o : opts.opts()) {
      list.push_back({{"name", o.name},
                      {"type", specs::OptTypeName(o.type)},
                      {"default", components::ValueJson(o.default_value)},
                      {"required", o.required},
                      {"help", o.help}});
    }
    out += fmt::format("{}:\n{}\n\n", info.name, opts.Format());
  }
  Print(f->Has("--json") ? doc.dump() + "\n" : out);
  return 0;
}

int ConfigureCommand(const Args& args) {
  auto f = ParseFlags("configure",
                      {kHelp,
                       {{"--schedulers", "-s"}, true},
                       {{"--print"}, false},
                       {{"--all", "-a"}, false},
                       {{"--force"}, false}},
                      args);
  if (!f.ok()) return ReportError(f.status());
  if (f->Has("--help")) {
    return Usage(
        "usage: trun configure [-s SCHEDULER,...] [--print] [-a|--all] [--force]\n\n"
        "Writes ./.trunconfig with a section per scheduler: required run options get a\n"
        "#FIXME placeholder, and with --all the optional ones their defaults.\n"
        "  --print   print it instead of writing the file\n"
        "  --force   replace an existing .trunconfig\n");
  }
  if (!f->positionals.empty()) {
    return ReportError(
        Status::InvalidArgument("configure: unexpected argument '" + f->positionals[0] + "'"));
  }
  std::vector<std::string> names;
  if (f->Has("--schedulers")) {
    names = Split(f->Get("--schedulers"), ',');
  } else {
    for (const auto& info : schedulers::Schedulers()) {
      if (info.create) names.push_back(info.name);
    }
  }
  std::vector<specs::IniSection> sections;
  for (const auto& n : names) {
    auto s = schedulers::CreateScheduler(n, std::string(schedulers::kDefaultSession));
    if (!s.ok()) return ReportError(s.status());
    sections.push_back(specs::RunOptsSection(n, (*s)->RunOpts(), !f->Has("--all")));
  }
  std::string text = specs::FormatIni(sections);
  if (f->Has("--print")) {
    Print(text);
    return 0;
  }
  const std::string path(specs::kConfigFile);
  if (!f->Has("--force") && ::access(path.c_str(), F_OK) == 0) {
    return ReportError(Status::InvalidArgument(
        "configure: ./.trunconfig exists; --print shows what would be written, --force replaces "
        "it"));
  }
  Status s = WriteFileAtomic(path, text);
  if (!s.ok()) return ReportError(s);
  log::Info("wrote {}", path);
  return 0;
}

int LocalSupervisorCommand(const Args& args) {
  auto fd = args.size() == 2 ? ParseInt(args[1]) : std::nullopt;
  if (!fd) {
    return ReportError(Status::InvalidArgument(
        "local-supervisor: expected APP_DIR READY_FD; the local scheduler starts it, not you"));
  }
  return schedulers::RunLocalSupervisor(args[0], static_cast<int>(*fd));
}

}  // namespace trun::cli
