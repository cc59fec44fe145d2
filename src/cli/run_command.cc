// `trun run`: component -> AppDef -> scheduler request -> submitted app.
#include "cli/run_command.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <thread>

#include "cli/app_helpers.h"
#include "cli/flags.h"
#include "common/exit_code.h"
#include "common/files.h"
#include "common/log.h"
#include "components/builtins.h"
#include "components/file_component.h"
#include "proc/pump.h"
#include "schedulers/kubernetes_manifests.h"
#include "specs/config.h"
#include "specs/macros.h"
#include "specs/serialize.h"

namespace trun::cli {
namespace {

using specs::AppState;

constexpr const char* kRunUsage =
    "usage: trun run [-s SCHEDULER] [-cfg K=V,...] [--dryrun [--json | --manifests]]\n"
    "                [--wait] [--log] [--tee-logs] [--stdin]\n"
    "                COMPONENT [COMPONENT ARGS...]\n"
    "\n"
    "Builds the app a component describes and submits it to a scheduler; prints the app's\n"
    "handle, SCHEDULER://SESSION/APP_ID. COMPONENT is a builtin (`trun builtins`) or a\n"
    "component file (./my_component.yaml, ./my_component.py:FUNCTION, a.module:FUNCTION);\n"
    "`trun run COMPONENT --help` shows its arguments.\n"
    "\n"
    "options:\n"
    "  -s, --scheduler SCHEDULER   where the app runs (default: [cli:run] scheduler in\n"
    "                              .trunconfig, else local)\n"
    "  -cfg, --scheduler_args K=V,...\n"
    "                              the scheduler's run options (`trun runopts SCHEDULER`)\n"
    "  --dryrun                    print the AppDef and the scheduler's request; submit nothing\n"
    "  --json                      with --dryrun: print them as one JSON object (app,\n"
    "                              scheduler, cfg, request, text)\n"
    "  --manifests                 with --dryrun -s kubernetes: print only the API objects,\n"
    "                              as YAML documents, for `kubectl apply -f -`\n"
    "  --wait                      wait for the app to end; exit 0 only if it SUCCEEDED\n"
    "  --log                       follow the replicas' logs (on stderr) until the app ends\n"
    "  --tee-logs, --tee_logs      as --log\n"
    "  --stdin                     read TorchX's run arguments as one JSON object from stdin\n"
    "                              (component_name, scheduler, scheduler_args, ...; docs/cli.md)\n"
    "  -h, --help                  show this help\n";

const std::vector<Flag> kRunFlags = {
    {{"--scheduler", "-s"}, true},
    {{"--scheduler_args", "-cfg", "--scheduler-args"}, true},
    {{"--dryrun"}, false},
    {{"--json"}, false},
    {{"--manifests"}, false},
    {{"--wait"}, false},
    {{"--log"}, false},
    {{"--tee_logs", "--tee-logs"}, false},
    {{"--stdin"}, false},
    {{"--help", "-h"}, false},
};

// A JSON value as trun's command line spells it: bools true/false, lists
// a,b, objects K<kv>V,K2<kv>V2; in a -cfg value (`quote`), a string holding
// a separator is quoted.
std::string Word(const nlohmann::ordered_json& v, char kv, bool quote) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    bool separator = s.find_first_of(",;=") != std::string::npos;
    return quote && separator
               ? (s.find('\'') == std::string::npos ? "'" + s + "'" : "\"" + s + "\"")
               : s;
  }
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) out += (out.empty() ? "" : ",") + Word(e, kv, false);
    return out;
  }
  if (v.is_object()) {
    std::string out;
    for (const auto& [k, e] : v.items()) {
      out += (out.empty() ? "" : ",") + k + kv + Word(e, kv, false);
    }
    return out;
  }
  return v.dump();
}

std::string Summary(const specs::RoleStatus& rs) {
  int pending = 0, running = 0, succeeded = 0, failed = 0, cancelled = 0;
  for (const auto& r : rs.replicas) {
    switch (r.state) {
      case AppState::kRunning:
        ++running;
        break;
      case AppState::kSucceeded:
        ++succeeded;
        break;
      case AppState::kFailed:
      case AppState::kUnknown:
        ++failed;
        break;
      case AppState::kCancelled:
        ++cancelled;
        break;
      default:
        ++pending;
    }
  }
  std::string s = fmt::format("{}: {} pending, {} running, {} succeeded, {} failed", rs.role,
                              pending, running, succeeded, failed);
  if (cancelled) s += fmt::format(", {} cancelled", cancelled);
  return s;
}

// What Ctrl-C during --wait says: the app is detached and keeps running;
// only the waiting stops. Written by the handler, so prepared beforehand.
char interrupt_note[512];

void OnInterrupt(int sig) {
  (void)!::write(2, interrupt_note, std::strlen(interrupt_note));
  ::_exit(ExitForSignal(sig));
}

// Waits for the app to end. On a terminal (and without logs on it) one line
// per role is redrawn in place; otherwise a line is printed per role when
// its counts change. Returns 0 if the app SUCCEEDED, else 1.
int Wait(schedulers::Scheduler& s, const std::string& app_id, bool live) {
  const std::string handle = s.Handle(app_id);
  fmt::format_to_n(interrupt_note, sizeof interrupt_note - 1,
                   "\ntrun: stopped waiting; {} keeps running (`trun cancel {}` stops it)\n",
                   handle, handle);
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  ::sigaction(SIGINT, &sa, nullptr);
  const bool redraw = live && ::isatty(2);
  std::vector<std::string> shown;
  size_t drawn = 0;
  std::chrono::milliseconds poll(10);
  while (true) {
    auto d = s.Describe(app_id);
    if (!d.ok()) return ReportError(d.status());
    std::vector<std::string> lines;
    lines.push_back(
        fmt::format("{} {}{}", handle, specs::AppStateName(d->state),
                    d->num_restarts > 0 ? fmt::format(" (restarts: {})", d->num_restarts) : ""));
    for (const auto& rs : d->roles_statuses) lines.push_back("  " + Summary(rs));
    if (redraw) {
      std::string out;
      for (size_t i = 0; i < drawn; ++i) out += "\033[F";
      for (const auto& l : lines) out += "\r\033[2K" + l + "\n";
      (void)proc::WriteAll(2, out);
      drawn = lines.size();
    } else if (live && lines != shown) {
      std::string out;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i < shown.size() && shown[i] == lines[i]) continue;
        out += (i == 0 ? lines[i] : lines[0].substr(0, lines[0].find(' ')) + lines[i]) + "\n";
      }
      (void)proc::WriteAll(2, out);
    }
    shown = lines;
    if (specs::IsTerminal(d->state)) {
      if (d->state != AppState::kSucceeded) {
        (void)proc::WriteAll(2, d->ToAppStatus().Format() + "\n");
        return kExitFailed;
      }
      return kExitSuccess;
    }
    // Short apps end soon: look again quickly at first, then every 200 ms.
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace

const std::vector<Flag>& RunFlags() { return kRunFlags; }

Result<Args> RunArgsFromJson(std::string_view json) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("run --stdin: stdin is not JSON ({}); write one object, e.g. "
                    "{{\"component_name\": \"utils.echo\", \"scheduler\": \"local\", "
                    "\"scheduler_args\": {{}}}}",
                    e.what()));
  }
  if (!j.is_object()) return Status::InvalidArgument("run --stdin: expected one JSON object");
  std::vector<std::string> problems;
  // A field's value, null when absent (operator[] would add it).
  auto get = [&](const char* key) {
    return j.contains(key) ? j.at(key) : nlohmann::ordered_json();
  };
  auto want = [&](const char* key, bool ok, const char* what) {
    if (j.contains(key) && !ok) problems.push_back(fmt::format("{}: expected {}", key, what));
  };
  for (const char* key : {"component_name", "scheduler", "scheduler_args"}) {
    if (!j.contains(key)) problems.push_back(fmt::format("{}: missing (a required field)", key));
  }
  static const char* const kFields[] = {"component_name",
                                        "scheduler",
                                        "scheduler_args",
                                        "scheduler_cfg",
                                        "dryrun",
                                        "wait",
                                        "log",
                                        "workspace",
                                        "parent_run_id",
                                        "tee_logs",
                                        "component_args",
                                        "component_args_str"};
  // No structured binding: clang 14 (the sanitizer tree's) cannot capture one.
  for (const auto& field : j.items()) {
    if (std::find_if(std::begin(kFields), std::end(kFields),
                     [&](const char* f) { return field.key() == f; }) == std::end(kFields)) {
      problems.push_back(fmt::format("{}: not a field of TorchX's run arguments", field.key()));
    }
  }
  want("component_name", get("component_name").is_string(), "a string");
  want("scheduler", get("scheduler").is_string(), "a string");
  for (const char* key : {"scheduler_args", "scheduler_cfg", "component_args"}) {
    want(key, get(key).is_object(), "an object");
  }
  for (const char* key : {"dryrun", "wait", "log", "tee_logs"}) {
    want(key, get(key).is_boolean(), "true or false");
  }
  want("component_args_str", get("component_args_str").is_array(), "a list of strings");
  if (j.contains("workspace") && get("workspace") != "") {
    problems.push_back(
        "workspace: trun has no workspaces (replicas run in the submitter's "
        "directory); leave it out or \"\"");
  }
  if (!problems.empty()) {
    std::string msg = "run --stdin:";
    for (const auto& p : problems) msg += "\n  " + p;
    return Status::InvalidArgument(msg);
  }
  Args out = {"--scheduler", get("scheduler").get<std::string>()};
  std::string cfg;
  const nlohmann::ordered_json scheduler_args = get("scheduler_args");
  for (const auto& [k, v] : scheduler_args.items()) {
    if (!v.is_null()) cfg += (cfg.empty() ? "" : ",") + k + "=" + Word(v, ':', true);
  }
  if (!cfg.empty()) out.insert(out.end(), {"-cfg", cfg});
  for (const char* flag : {"dryrun", "wait", "log", "tee_logs"}) {
    if (j.value(flag, false)) out.push_back(std::string("--") + flag);
  }
  out.push_back(get("component_name").get<std::string>());
  const nlohmann::ordered_json component_args = get("component_args");
  for (const auto& [k, v] : component_args.items()) {
    if (!v.is_null()) out.insert(out.end(), {"--" + k, Word(v, '=', false)});
  }
  const nlohmann::ordered_json words = get("component_args_str");
  for (const auto& w : words) {
    out.push_back(w.is_string() ? w.get<std::string>() : w.dump());
  }
  return out;
}

int RunCommand(const Args& args) {
  auto flags = ParseFlags("run", kRunFlags, args, /*stop_at_positional=*/true);
  if (!flags.ok()) return ReportError(flags.status());
  if (flags->Has("--help")) {
    std::fputs(kRunUsage, stdout);
    return 0;
  }
  if (flags->Has("--stdin")) {
    // As TorchX: stdin says everything, except that --dryrun (and how to
    // print it) may be added on the command line.
    for (const auto& arg : args) {
      if (arg != "--stdin" && arg != "--dryrun" && arg != "--json" && arg != "--manifests") {
        return ReportError(Status::InvalidArgument(fmt::format(
            "run: cannot give '{}' with --stdin (the JSON object on stdin holds the run's "
            "arguments; only --dryrun, --json and --manifests may be added)",
            arg)));
      }
    }
    std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    auto from_json = RunArgsFromJson(text);
    if (!from_json.ok()) return ReportError(from_json.status());
    Args again = *from_json;
    for (const char* flag : {"--dryrun", "--json", "--manifests"}) {
      if (flags->Has(flag) && std::find(again.begin(), again.end(), flag) == again.end()) {
        again.insert(again.begin(), flag);
      }
    }
    return RunCommand(again);
  }
  auto config = specs::TrunConfig::Load();
  if (!config.ok()) return ReportError(config.status());

  // The component and its arguments; [cli:run] component when the
  // arguments start with an option.
  std::vector<std::string> rest = flags->positionals;
  std::string component_name;
  if (!rest.empty() && !(rest[0].size() > 1 && rest[0][0] == '-')) {
    component_name = rest[0];
    rest.erase(rest.begin());
  } else if (auto c = config->Get("cli:run", "component")) {
    component_name = *c;
  } else {
    return ReportError(Status::InvalidArgument(
        "run: missing the component, e.g. `trun run utils.echo --msg hi`; `trun builtins` lists "
        "the builtins (or set [cli:run] component in .trunconfig)"));
  }
  if (flags->Has("--json") && !flags->Has("--dryrun")) {
    return ReportError(Status::InvalidArgument(
        "run: --json goes with --dryrun (a submitted app's handle is printed alone on stdout)"));
  }
  const std::string sched_name =
      flags->Get("--scheduler", config->Get("cli:run", "scheduler").value_or("local"));
  if (flags->Has("--manifests")) {
    if (!flags->Has("--dryrun") || flags->Has("--json")) {
      return ReportError(Status::InvalidArgument(
          "run: --manifests goes with --dryrun, without --json (it prints the objects alone)"));
    }
    if (sched_name != "kubernetes") {
      return ReportError(Status::InvalidArgument(fmt::format(
          "run: --manifests prints Kubernetes API objects; the {} scheduler has none (use -s "
          "kubernetes, or --dryrun alone)",
          sched_name)));
    }
  }

  auto component = components::FindComponent(component_name, SelfExecutable());
  if (!component.ok()) return ReportError(component.status());
  auto parsed = components::ParseComponentArgs(*component, rest,
                                               config->Section("component:" + component_name));
  if (!parsed.ok()) return ReportError(parsed.status());
  if (parsed->help) {
    std::fputs(components::ComponentHelp(*component).c_str(), stdout);
    return 0;
  }
  auto scheduler =
      schedulers::CreateScheduler(sched_name, std::string(schedulers::kDefaultSession));
  if (!scheduler.ok()) return ReportError(scheduler.status());
  schedulers::Scheduler& s = **scheduler;

  auto cfg = s.RunOpts().CfgFromStr(flags->Get("--scheduler_args"), sched_name);
  if (!cfg.ok()) return ReportError(cfg.status());
  Status applied = config->ApplySchedulerSection(sched_name, s.RunOpts(), *cfg);
  if (!applied.ok()) return ReportError(applied);

  auto app = components::Materialize(*component, parsed->args);
  if (!app.ok()) return ReportError(app.status());
  // As TorchX's runner does: every replica knows its app's handle.
  for (auto& role : app->roles) {
    role.env["TORCHX_JOB_ID"] =
        fmt::format("{}://{}/{}", sched_name, s.session(), specs::kMacroAppId);
  }
  auto info = s.SubmitDryRun(*app, *cfg);
  if (!info.ok()) return ReportError(info.status());
  if (flags->Has("--json")) {
    // What trun.runner reads for TorchX's AppDryRunInfo.
    nlohmann::ordered_json j;
    j["app"] = specs::ToJson(info->app);
    j["scheduler"] = info->scheduler;
    j["cfg"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : info->cfg) j["cfg"][k] = components::ValueJson(v);
    j["request"] = info->RequestJson();
    j["text"] = info->Format();
    std::fputs((j.dump() + "\n").c_str(), stdout);
    return 0;
  }
  if (flags->Has("--manifests")) {
    const auto* req = std::get_if<schedulers::kube::Request>(&info->request);
    // -s kubernetes, checked with the flags above.
    if (req == nullptr) return ReportError(Status::Internal("--manifests: no Kubernetes request"));
    if (req->auto_workload) {
      log::Warning(
          "workload=auto: these are a JobSet, which needs JobSet's controller in the cluster; "
          "without it, use -cfg workload=job");
    }
    std::fputs(schedulers::kube::FormatManifests(*req).c_str(), stdout);
    return 0;
  }
  if (flags->Has("--dryrun")) {
    std::string out = "=== APPLICATION ===\n" + specs::AppDefToYaml(info->app) +
                      "\n=== SCHEDULER REQUEST ===\n" + info->Format();
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  auto app_id = s.Schedule(*info);
  if (!app_id.ok()) return ReportError(app_id.status());
  std::printf("%s\n", s.Handle(*app_id).c_str());
  std::fflush(stdout);

  const bool follow = flags->Has("--log") || flags->Has("--tee_logs");
  if (!follow && !flags->Has("--wait")) return 0;
  std::thread logs;
  Status log_status;
  if (follow) {
    auto d = s.Describe(*app_id);
    if (!d.ok()) return ReportError(d.status());
    schedulers::LogOptions options;
    options.tail = true;
    logs = std::thread([&, replicas = ReplicasOf(*d)] {
      log_status = FollowLogs(s, *app_id, replicas, options, 2);
    });
  }
  int rc = Wait(s, *app_id, /*live=*/!follow);
  if (logs.joinable()) logs.join();
  if (!log_status.ok()) log::Warning("{}", log_status.message());
  return rc;
}

}  // namespace trun::cli
