#include "launch/args.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "common/log.h"
#include "common/problems.h"
#include "common/strings.h"
#include "launch/numa_binding.h"
#include "launch/rdzv_conf.h"
#include "launch/skypilot_env.h"
#include "launch/slurm_env.h"
#include "launch/torch_devices.h"
#include "proc/signals.h"
#include "proc/spawn.h"
#include "store/auth.h"

namespace trun::launch {
namespace {

// One row per torchrun option. `names` is CLI11's spelling list; `dest` is
// argparse's destination, which names the PET_ variable.
struct OptionRow {
  const char* names;
  const char* dest;
  const char* help;
  bool is_flag = false;
  // torchrun reads no PET_ variable for it (--print-completion is an action,
  // not a setting: an exported PET_PRINT_COMPLETION must not stop every launch;
  // --logs-specs and --numa-binding are plain argparse options in torch).
  bool no_env = false;
  // trun's own option, which torchrun lacks: it never makes an abbreviation
  // of a torchrun option ambiguous (see ExpandAbbreviations).
  bool trun_only = false;
};

constexpr OptionRow kOptions[] = {
    {"--nnodes", "nnodes", "Number of nodes, or MIN:MAX for an elastic job (default 1:1)."},
    {"--nproc-per-node,--nproc_per_node", "nproc_per_node",
     "Workers per node: an int, cpu, gpu, xpu or auto (default 1)."},
    {"--rdzv-backend,--rdzv_backend", "rdzv_backend", "static (default), c10d, etcd or etcd-v2."},
    {"--rdzv-endpoint,--rdzv_endpoint", "rdzv_endpoint", "Rendezvous endpoint host[:port]."},
    {"--rdzv-id,--rdzv_id", "rdzv_id", "User-defined job id (default none)."},
    {"--rdzv-conf,--rdzv_conf", "rdzv_conf", "Rendezvous configuration k1=v1,k2=v2."},
    {"--standalone", "standalone", "One node: c10d rendezvous on a free local port.", true},
    {"--max-restarts,--max_restarts", "max_restarts",
     "Restarts of the worker group before failing (default 0)."},
    {"--monitor-interval,--monitor_interval", "monitor_interval",
     "Accepted for compatibility; trun sees worker exits as they happen."},
    {"--start-method,--start_method", "start_method",
     "spawn (default), fork, or forkserver: warm starts, workers forked from one Python "
     "process that imported torch once."},
    {"--event-log-handler,--event_log_handler", "event_log_handler",
     "null (default), console (the agent's events as JSON lines on stderr) or "
     "dynamic_rendezvous (as null)."},
    {"--event-log-file,--event_log_file", "event_log_file",
     "Append the agent's events to this file as JSON lines (also TRUN_EVENT_LOG).", false, false,
     true},
    {"--health-check-port,--health_check_port", "health_check_port",
     "Serve /health and /metrics over HTTP on this port, 0 for a free one (also "
     "TORCHELASTIC_HEALTH_CHECK_PORT).",
     false, false, true},
    {"--health-check-addr,--health_check_addr", "health_check_addr",
     "The IP address the health server binds (default every address).", false, false, true},
    {"--role", "role", "User-defined role of the workers (default default)."},
    {"-m,--module", "module", "Run the script as a Python module (python -m).", true},
    {"--no-python,--no_python", "no_python", "Run the script as a program, without python.", true},
    {"--run-path,--run_path", "run_path", "Run the script with runpy.run_path in the worker.",
     true},
    {"--log-dir,--log_dir", "log_dir", "Base directory for log files (default a new temp dir)."},
    {"-r,--redirects", "redirects", "Redirect streams to log files: 0-3 or a map like 0:1,1:2."},
    {"-t,--tee", "tee", "Tee streams to log files and the console: 0-3 or a map."},
    {"--log-line-prefix-template,--log_line_prefix_template", "log_line_prefix_template",
     "Prefix of teed console lines; ${role_name}, ${local_rank}, ${rank}, ${hostname} "
     "(default [${role_name}${local_rank}]:; also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)."},
    {"--local-ranks-filter,--local_ranks_filter", "local_ranks_filter",
     "Show only these local ranks on the console, e.g. 0,1."},
    {"--duplicate-stdout-filters,--duplicate_stdout_filters", "duplicate_stdout_filters",
     "Also write teed stdout lines containing any of these strings (a,b; ',,' is a comma) to "
     "filtered_stdout.log in the attempt's log dir."},
    {"--duplicate-stderr-filters,--duplicate_stderr_filters", "duplicate_stderr_filters",
     "The same for stderr, into filtered_stderr.log."},
    {"--node-rank,--node_rank", "node_rank", "Rank of this node (static rendezvous)."},
    {"--master-addr,--master_addr", "master_addr",
     "Address of the master node (static; default 127.0.0.1)."},
    {"--master-port,--master_port", "master_port",
     "Port on the master node (static; default: free port)."},
    {"--local-addr,--local_addr", "local_addr", "Address of this node."},
    {"--logs-specs,--logs_specs", "logs_specs",
     "torchrun's log-layout entry point: only default (torch's DefaultLogsSpecs, the layout trun "
     "writes).",
     false, true},
    {"--numa-binding,--numa_binding", "numa_binding",
     "NUMA binding: node, socket, exclusive, core-complex.", false, true},
    {"--signals-to-handle,--signals_to_handle", "signals_to_handle",
     "Signals forwarded to workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)."},
    {"--shutdown-timeout,--shutdown_timeout", "shutdown_timeout",
     "Seconds between the stop signal and SIGKILL (default TORCH_ELASTIC_SHUTDOWN_TIMEOUT, "
     "else 30)."},
    {"--virtual-local-rank,--virtual_local_rank", "virtual_local_rank",
     "Every worker sees LOCAL_RANK=0 and only its own GPU, through CUDA_VISIBLE_DEVICES.", true},
    {"--failure-lines,--failure_lines", "failure_lines",
     "Lines of the failed worker's output, per stream, printed before the failure table "
     "(default 20; 0 for none).",
     false, true, true},
    {"--hang-timeout,--hang_timeout", "hang_timeout",
     "Seconds without progress (no worker using CPU or writing output) after which the agent "
     "reports where each rank is (default none: off).",
     false, true, true},
    {"--hang-action,--hang_action", "hang_action",
     "What a hang does: report (default) or fail, which ends the attempt as a failure.", false,
     true, true},
    {"--store-relay,--store_relay", "store_relay",
     "Workers reach the job's store through their agent's relay, one connection per node: "
     "auto (default: on above 1024 workers in the job), on or off.",
     false, true, true},
    {"--print-completion,--print_completion", "print_completion",
     "Print a completion script for bash, zsh or tcsh and exit.", false, true},
};

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> AllOptionSpellings() {
  std::vector<std::string> out;
  for (const auto& f : LaunchFlags()) out.push_back(f.name);
  return out;
}

// torchrun's comma_separated_list: "a,b" is two filters, ",," stands for a
// literal comma, and an empty item is a filter too (one that every line
// contains, as in torch).
std::vector<std::string> SplitFilters(const std::string& v) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != ',') {
      out.back() += v[i];
    } else if (i + 1 < v.size() && v[i + 1] == ',') {
      out.back() += ',';
      ++i;
    } else {
      out.emplace_back();
    }
  }
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void ParseNnodes(const std::string& v, LaunchConfig& c, Problems& p) {
  auto parts = Split(v, ':');
  std::optional<long long> lo, hi;
  if (parts.size() == 1) {
    lo = hi = ParsePythonInt(parts[0]);
  } else if (parts.size() == 2) {
    lo = ParsePythonInt(parts[0]);
    hi = ParsePythonInt(parts[1]);
  }
  if (!lo || !hi || *lo <= 0 || *hi < *lo || *hi > 1'000'000) {
    p.Add(fmt::format("--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX, got '{}'", v));
    return;
  }
  c.min_nodes = static_cast<int>(*lo);
  c.max_nodes = static_cast<int>(*hi);
}

// torch._utils.cpu_count: the CPUs this process may run on
// (sched_getaffinity), which taskset and cgroups' cpusets narrow.
int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  return CPU_COUNT(&set);
}

// As torchrun's determine_local_world_size, with torch's counts asked of the
// worker interpreter (torch_devices.h) only when a device kind is named;
// any other word may be torch's privateuse1 backend (e.g. npu), so that too
// is asked.
void ParseNproc(const std::string& v, LaunchConfig& c, Problems& p) {
  if (v == "cpu") {
    c.nproc_per_node = AffinityCpus();
    return;
  }
  auto n = ParsePythonInt(v);
  if (n) {
    // torch's WorkerSpec asserts local_world_size > 0 before its agent
    // starts; any larger count is launched (CheckBeforeStart weighs it
    // against what this machine can run).
    if (*n <= 0) {
      p.Add(fmt::format(
          "--nproc-per-node: expected a positive number of workers, got '{}' (torchrun refuses it "
          "too)",
          v));
    } else if (*n > std::numeric_limits<int>::max()) {
      p.Add(
          fmt::format("--nproc-per-node: {} workers on one node is more than any machine runs", v));
    } else {
      c.nproc_per_node = static_cast<int>(*n);
    }
    return;
  }
  auto d = AskTorchDevices(WorkerPython(), false);
  const bool kind = v == "gpu" || v == "xpu" || v == "auto";
  if (!d.ok()) {
    p.Add(kind ? fmt::format("--nproc-per-node {}: {}", v, d.status().message())
               : fmt::format("--nproc-per-node: expected a number, cpu, gpu, xpu, auto or torch's "
                             "privateuse1 backend; got '{}', and {}",
                             v, d.status().message()));
    return;
  }
  if (v == "gpu") {
    if (!d->cuda_available) {
      p.Add(
          "--nproc-per-node gpu: CUDA is not available to torch in the worker interpreter "
          "(torch.cuda.is_available() is False); use a number, cpu or auto");
    }
    c.nproc_per_node = d->cuda_count;
  } else if (v == "xpu") {
    if (!d->xpu_available) {
      p.Add(
          "--nproc-per-node xpu: XPU is not available to torch in the worker interpreter "
          "(torch.xpu.is_available() is False); use a number, cpu or auto");
    }
    c.nproc_per_node = d->xpu_count;
  } else if (!d->privateuse1_name.empty() && v == d->privateuse1_name) {
    if (!d->privateuse1_available) {
      p.Add(fmt::format(
          "--nproc-per-node {0}: {0} is not available to torch in the worker interpreter (its "
          "device module is missing or says no); use a number, cpu or auto",
          v));
    }
    c.nproc_per_node = d->privateuse1_count;
  } else if (v == "auto") {
    c.nproc_per_node = d->accelerator_available ? d->accelerator_count : AffinityCpus();
  } else {
    p.Add(
        fmt::format("--nproc-per-node: expected a positive number, cpu, gpu, xpu, auto{}; got '{}'",
                    d->privateuse1_name.empty()
                        ? ""
                        : fmt::format(" or {} (torch's privateuse1 backend)", d->privateuse1_name),
                    v));
  }
}

std::optional<int> ParseNonNegative(const std::string& flag, const std::string& v, Problems& p,
                                    long long max = 1'000'000) {
  auto n = ParsePythonInt(v);
  if (!n || *n < 0 || *n > max) {
    p.Add(fmt::format("{}: expected a whole number from 0 to {}, got '{}'", flag, max, v));
    return std::nullopt;
  }
  return static_cast<int>(*n);
}

std::string RandomUuid4() {
  unsigned char b[16];
  FILE* f = std::fopen("/dev/urandom", "rb");
  size_t got = f ? std::fread(b, 1, sizeof b, f) : 0;
  if (f) std::fclose(f);
  for (size_t i = got; i < sizeof b; ++i) b[i] = static_cast<unsigned char>(std::rand());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  return fmt::format(
      "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:"
      "02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
      b[15]);
}

// torch's DefaultLogsSpecs, which torchrun builds as it decides: a --log-dir
// that is a file is refused, a missing one is created there and then (with
// its parents), and one that cannot be created is refused.
void PrepareLogDir(const std::string& dir, Problems& p) {
  if (dir == "/dev/null") return;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode)) {
      p.Add(fmt::format("--log-dir {}: is a file, not a directory; choose a directory", dir));
    }
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    p.Add(fmt::format("--log-dir {}: cannot create it: {}; choose a writable directory", dir,
                      ec.message()));
  }
}

// A script may be any readable non-directory: a file, /dev/fd/N, a FIFO.
bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

// torchrun finds a missing script or program only when its workers start
// (they fail, or its agent does); trun decides as torchrun does and says so
// at once.
void BuildEntrypoint(LaunchConfig& c) {
  const std::string& script = c.training_script;
  std::string python = Env("PYTHON_EXEC");
  if (python.empty()) python = "python3";
  switch (c.entrypoint_kind) {
    case EntrypointKind::kBinary:
      if (auto found = proc::ResolveExecutable(script, Env("PATH")); !found.ok()) {
        log::Warning(
            "--no-python: {}; the workers cannot start, and trun fails as it starts them, as "
            "torchrun does; give a path or a program on PATH",
            found.status().message());
      }
      c.worker_argv = {script};
      c.entrypoint_name = script;
      break;
    case EntrypointKind::kModule:
      c.worker_argv = {python, "-u", "-m", script};
      c.entrypoint_name = script;
      break;
    case EntrypointKind::kScript:
      if (!IsFile(script)) {
        log::Warning(
            "training script '{}' not found (or not a file): its workers will fail as they start, "
            "as under torchrun; check the path, or use -m for a module and --no-python for a "
            "program",
            script);
      }
      c.worker_argv = {python, "-u", script};
      c.entrypoint_name = script;
      break;
    case EntrypointKind::kRunPath:
      if (!IsFile(script)) {
        log::Warning(
            "--run-path: script '{}' not found (or not a file): its workers will fail as they "
            "start, as under torchrun; check the path",
            script);
      }
      // torchrun runs the script in its worker with runpy; so does this.
      c.worker_argv = {python, "-u", "-c",
                       "import runpy, sys; sys.argv = sys.argv[1:]; "
                       "runpy.run_path(sys.argv[0], run_name='__main__')",
                       script};
      c.entrypoint_name = script;
      break;
  }
  c.worker_argv.insert(c.worker_argv.end(), c.training_script_args.begin(),
                       c.training_script_args.end());
}

// argparse's test of whether a word after an option that needs a value is
// that value or another option: a word of two characters or more that starts
// with '-' is an option unless it is a negative number or holds a space.
bool LooksLikeAnOption(const std::string& a) {
  if (a.size() < 2 || a[0] != '-' || a.find(' ') != std::string::npos) return false;
  std::string_view num = std::string_view(a).substr(1);
  const size_t dot = num.find('.');
  auto digits = [](std::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  const bool negative_number =
      dot == std::string_view::npos
          ? digits(num)
          : digits(num.substr(0, dot)) && dot + 1 < num.size() && digits(num.substr(dot + 1));
  return !negative_number;
}

// Reads the options (up to the training script or `--`) as torchrun's
// argparse does and rewrites them into the spelling CLI11 reads alike:
//  - any unambiguous prefix of a long option is the option (allow_abbrev):
//    `--nnode 2`, `--max_restart=3`, `--nproc-per 4`. Each spelling counts on
//    its own, as in argparse, so `--nproc` (a prefix of both --nproc-per-node
//    and --nproc_per_node) is ambiguous, an error naming the options it could
//    be. A prefix that matches a torchrun option never reaches trun's own
//    options (--event-log-file, --health-check-*), so every command line
//    torchrun reads is read alike;
//  - `--opt=` is the value '' (CLI11 would take the next word), and `-t=3`
//    is -t's value 3;
//  - a flag given a value (`--standalone=1`), and an option whose value is
//    missing or looks like an option (`--role -x`), are errors, as argparse's.
Status ExpandAbbreviations(std::vector<std::string>& args) {
  struct Spelling {
    std::string name;
    bool takes_value;
    bool trun_only;
  };
  std::vector<Spelling> spellings = {{"-h", false, false}, {"--help", false, false}};
  for (const auto& row : kOptions) {
    for (auto& n : Split(row.names, ',')) spellings.push_back({n, !row.is_flag, row.trun_only});
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the training script
    const bool long_option = a[1] == '-';
    const size_t eq = long_option ? a.find('=') : std::string::npos;
    const std::string name = long_option ? a.substr(0, eq) : a.substr(0, 2);
    const Spelling* found = nullptr;
    for (const auto& s : spellings) {
      if (s.name == name) found = &s;
    }
    if (!found && long_option) {
      std::vector<const Spelling*> matches;
      for (bool trun_only : {false, true}) {
        for (const auto& s : spellings) {
          if (s.trun_only == trun_only && s.name.starts_with(name)) matches.push_back(&s);
        }
        if (!matches.empty()) break;
      }
      if (matches.size() > 1) {
        std::string names;
        for (const auto* m : matches) names += (names.empty() ? "" : ", ") + m->name;
        return Status::InvalidArgument(
            fmt::format("ambiguous option: {} could match {}; spell the option out", name, names));
      }
      if (matches.empty()) break;  // unknown: reported with a suggestion later
      found = matches.front();
      args[i] = found->name + (eq == std::string::npos ? "" : a.substr(eq));
    }
    if (!found) continue;
    if (!found->takes_value) {
      if (eq != std::string::npos) {
        return Status::InvalidArgument(fmt::format(
            "argument {}: ignored explicit argument '{}'; {} is a flag and takes no value, so "
            "give it alone (or leave it out)",
            found->name, a.substr(eq + 1), found->name));
      }
      continue;
    }
    if (eq != std::string::npos) {
      // `--opt=`: argparse's value is ''; CLI11 would take the next word.
      if (eq + 1 == a.size()) {
        args[i] = found->name;
        args.insert(args.begin() + static_cast<std::ptrdiff_t>(++i), "");
      }
      continue;
    }
    if (!long_option && a.size() > 2) {
      // `-t3`, and `-t=3`, whose value argparse reads as 3.
      if (a[2] == '=') {
        args[i] = name;
        args.insert(args.begin() + static_cast<std::ptrdiff_t>(++i), a.substr(3));
      }
      continue;
    }
    if (i + 1 == args.size() || LooksLikeAnOption(args[i + 1])) {
      return Status::InvalidArgument(fmt::format(
          "argument {}: expected one argument{}", found->name,
          i + 1 == args.size()
              ? ""
              : fmt::format("; '{}' reads as an option, so attach a value that starts with '-' "
                            "as {}={}",
                            args[i + 1], found->name, args[i + 1])));
    }
    ++i;
  }
  return Status::OK();
}

std::string HelpText(const CLI::App& app) {
  std::string text = app.help();
  text +=
      "\ntrun runs training_script on nproc-per-node workers, as torchrun does: every torchrun\n"
      "flag is accepted in dash and underscore spellings, and PET_<FLAG> sets its default.\n"
      "See docs/cli.md for each flag and trun's exit codes.\n"
      "\nSubcommands (each with --help): run, status, log, cancel, list, describe, builtins,\n"
      "runopts, configure (jobs of TorchX components, e.g. trun run dist.ddp -j 2x4 --script\n"
      "train.py); store; version.\n";
  return text;
}

}  // namespace

std::vector<LaunchFlag> LaunchFlags() {
  std::vector<LaunchFlag> out = {{"-h", false}, {"--help", false}};
  for (const auto& row : kOptions) {
    for (auto& n : Split(row.names, ',')) out.push_back({n, !row.is_flag});
  }
  return out;
}

Result<StdSpec> ParseStdSpec(const std::string& flag, const std::string& value) {
  // torch's Std.from_str: ^[0123]$ or ^(\d:[0123],)*(\d:[0123])$, nothing
  // trimmed; trun also takes local ranks of several digits.
  auto digits = [](std::string_view d) {
    return !d.empty() &&
           std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  auto level = [](std::string_view l) -> std::optional<Std> {
    if (l.size() != 1 || l[0] < '0' || l[0] > '3') return std::nullopt;
    return static_cast<Std>(l[0] - '0');
  };
  StdSpec spec;
  if (auto l = level(value)) {
    spec.all = *l;
    return spec;
  }
  spec.is_map = true;
  for (auto& item : Split(value, ',')) {
    const size_t colon = item.find(':');
    const std::string_view rank = std::string_view(item).substr(0, colon);
    std::optional<Std> l;
    if (colon != std::string::npos && digits(rank))
      l = level(std::string_view(item).substr(colon + 1));
    auto r = l ? ParseInt(rank) : std::nullopt;
    if (!r || *r > 1'000'000) {
      return Status::InvalidArgument(fmt::format(
          "{}: '{}' is neither a level 0-3 (0 none, 1 stdout, 2 stderr, 3 both) nor a map of "
          "local_rank:level like 0:3,1:2 (no spaces)",
          flag, value));
    }
    spec.per_rank[static_cast<int>(*r)] = *l;
  }
  return spec;
}

Result<ParsedLaunch> ParseLaunchArgs(const std::vector<std::string>& args) {
  CLI::App app{"trun: launch and supervise PyTorch workers (a drop-in for torchrun)", "trun"};
  app.prefix_command();
  app.allow_extras();
  app.set_help_flag("-h,--help", "Print this help and exit.");

  std::map<std::string, std::string> values;
  std::map<std::string, bool> flags;
  std::map<std::string, CLI::Option*> opts;
  for (const auto& row : kOptions) {
    CLI::Option* o;
    if (row.is_flag) {
      flags[row.dest] = false;
      o = app.add_flag(row.names, flags[row.dest], row.help);
    } else {
      values[row.dest];
      o = app.add_option(row.names, values[row.dest], row.help);
    }
    // As argparse: an option given twice keeps its last value.
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    opts[row.dest] = o;
  }

  std::vector<std::string> expanded = args;
  if (Status s = ExpandAbbreviations(expanded); !s.ok()) {
    return Status::InvalidArgument(fmt::format("{}; run 'trun --help' for the flags", s.message()));
  }
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return ParsedLaunch{LaunchAction::kHelp, HelpText(app), {}, ""};
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(fmt::format("{}; run 'trun --help' for the flags", e.what()));
  }

  // As torchrun's argparse action: the script is printed whatever else the
  // command line holds (no training script needed).
  if (opts["print_completion"]->count() > 0) {
    const std::string& shell = values["print_completion"];
    for (const char* known : kCompletionShells) {
      if (shell == known) return ParsedLaunch{LaunchAction::kPrintCompletion, "", {}, shell};
    }
    return Status::InvalidArgument(fmt::format(
        "--print-completion: expected bash, zsh or tcsh, got '{}'; e.g. trun --print-completion "
        "bash > ~/.local/share/bash-completion/completions/trun",
        shell));
  }

  Problems p;
  LaunchConfig c;
  // torchrun's argparse actions read PET_<DEST> as the default: `env` takes
  // a set variable's text, '' included, as the option's value; `check_env`
  // reads a flag's as a Python int, true when not 0. trun's own options read
  // none (their variables are TRUN_* and TORCHELASTIC_*), so a PET_ variable
  // never stops a launch that torchrun would run.
  std::set<std::string> from_env;
  for (const auto& row : kOptions) {
    if (row.no_env || row.trun_only) continue;
    const std::string name = "PET_" + Upper(row.dest);
    const char* env = std::getenv(name.c_str());
    if (env == nullptr || opts[row.dest]->count() > 0) continue;
    if (!row.is_flag) {
      values[row.dest] = env;
      from_env.insert(row.dest);
    } else if (auto n = ParsePythonInt(env)) {
      flags[row.dest] = *n != 0;
    } else {
      p.Add(
          fmt::format("{}='{}': expected 1 (on) or 0 (off), as torchrun reads it; set it to 1 "
                      "or 0, or unset it",
                      name, env));
    }
  }
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest[0] == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    p.Add("missing training_script: usage: trun [OPTIONS] training_script [args...]");
  } else if (rest[0].size() > 1 && rest[0][0] == '-') {
    std::string flag = rest[0].substr(0, rest[0].find('='));
    std::string guess = ClosestMatch(flag, AllOptionSpellings());
    p.Add(fmt::format("unknown option '{}'{}; run 'trun --help' for the flags", flag,
                      guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
  } else {
    c.training_script = rest[0];
    c.training_script_args.assign(rest.begin() + 1, rest.end());
  }

  auto user_given = [&](const char* dest) {
    return opts[dest]->count() > 0 || from_env.count(dest) > 0;
  };
  auto value = [&](const char* dest) -> const std::string& { return values[dest]; };
  // Under srun or in a SkyPilot task, the cluster's environment says what the
  // user left entirely unsaid (slurm_env.h, skypilot_env.h); the first that
  // applies. Any rendezvous choice of the user's means the user drives, as
  // under torchrun: `--nnodes 1` runs one standalone job per node, and
  // --master-addr/--master-port/--node-rank are a static job. Kubeflow
  // Trainer sets torchrun's own PET_ variables, read above.
  std::set<std::string> from_cluster;
  const bool user_drives =
      flags["standalone"] ||
      std::ranges::any_of(
          std::initializer_list<const char*>{"rdzv_backend", "rdzv_endpoint", "master_addr",
                                             "master_port", "node_rank", "nnodes"},
          user_given);
  if (!user_drives) {
    const GetEnv env = [](const char* name) { return Env(name); };
    for (auto cluster : {SlurmLaunchDefaults(env), SkyPilotLaunchDefaults(env)}) {
      if (!cluster.ok()) p.Add(cluster.status().message());
      if (!cluster.ok() || cluster->empty()) continue;
      for (const auto& [dest, v] : *cluster) {
        if (!user_given(dest.c_str())) values[dest] = v, from_cluster.insert(dest);
      }
      break;
    }
  }
  auto given = [&](const char* dest) { return user_given(dest) || from_cluster.count(dest) > 0; };

  if (given("nnodes")) ParseNnodes(value("nnodes"), c, p);
  if (given("nproc_per_node")) ParseNproc(value("nproc_per_node"), c, p);
  if (given("rdzv_backend")) c.rdzv_backend = value("rdzv_backend");
  if (given("rdzv_endpoint")) c.rdzv_endpoint = value("rdzv_endpoint");
  if (given("rdzv_id")) c.rdzv_id = value("rdzv_id");
  std::map<std::string, std::string> rdzv_conf;
  if (given("rdzv_conf")) rdzv_conf = SplitRdzvConf(value("rdzv_conf"), p);
  c.standalone = flags["standalone"];
  if (given("max_restarts")) {
    if (auto n = ParseNonNegative("--max-restarts", value("max_restarts"), p,
                                  std::numeric_limits<int>::max())) {
      c.max_restarts = *n;
    }
  }
  if (given("failure_lines")) {
    if (auto n = ParseNonNegative("--failure-lines", value("failure_lines"), p)) {
      c.failure_lines = *n;
    }
  }
  if (given("hang_timeout")) {
    auto d = ParseDouble(value("hang_timeout"));
    if (!d || !(*d > 0)) {
      p.Add(fmt::format("--hang-timeout: expected seconds > 0, got '{}'", value("hang_timeout")));
    } else {
      c.hang_timeout_s = *d;
    }
  }
  if (given("store_relay")) {
    const std::string mode = value("store_relay");
    if (mode == "auto") {
      c.store_relay = LaunchConfig::StoreRelay::kAuto;
    } else if (mode == "on") {
      c.store_relay = LaunchConfig::StoreRelay::kOn;
    } else if (mode == "off") {
      c.store_relay = LaunchConfig::StoreRelay::kOff;
    } else {
      p.Add(fmt::format("--store-relay: expected auto, on or off, got '{}'", mode));
    }
  }
  if (given("hang_action")) {
    const std::string action = value("hang_action");
    if (action != "report" && action != "fail") {
      p.Add(fmt::format("--hang-action: expected report or fail, got '{}'", action));
    } else if (!given("hang_timeout")) {
      p.Add("--hang-action needs --hang-timeout SECONDS (without it nothing is judged hung)");
    } else {
      c.hang_fail = action == "fail";
    }
  }
  if (given("monitor_interval")) {
    auto d = ParsePythonFloat(value("monitor_interval"));
    // torch's WorkerSpec asserts monitor_interval > 0 before its agent starts.
    if (!d || !(*d > 0) || !std::isfinite(*d)) {
      p.Add(
          fmt::format("--monitor-interval: expected seconds > 0, got '{}' (torchrun refuses 0 "
                      "and less too)",
                      value("monitor_interval")));
    } else {
      c.monitor_interval = *d;
    }
  }
  if (given("start_method")) {
    c.start_method = value("start_method");
    if (c.start_method != "spawn" && c.start_method != "fork" && c.start_method != "forkserver") {
      p.Add(fmt::format("--start-method: expected spawn, fork or forkserver, got '{}'",
                        c.start_method));
    } else if (c.start_method == "forkserver" && flags["no_python"] && !flags["run_path"]) {
      p.Add(
          "--start-method forkserver forks workers from a Python process; a --no-python "
          "program cannot be started that way (use spawn)");
    }
  }
  if (given("event_log_handler")) {
    // torch's registered handlers (torch/distributed/elastic/events/handlers.py):
    // dynamic_rendezvous is a null handler there too.
    c.event_log_handler = value("event_log_handler");
    if (c.event_log_handler == "dynamic_rendezvous") c.event_log_handler = "null";
    if (c.event_log_handler != "null" && c.event_log_handler != "console") {
      p.Add(fmt::format(
          "--event-log-handler: expected null, console or dynamic_rendezvous (torch's registered "
          "handlers), got '{}'",
          c.event_log_handler));
    }
  }
  c.event_log_file = given("event_log_file") ? value("event_log_file") : Env("TRUN_EVENT_LOG");
  std::string health_port = given("health_check_port") ? value("health_check_port")
                                                       : Env("TORCHELASTIC_HEALTH_CHECK_PORT");
  if (!health_port.empty()) {
    auto n = ParseInt(health_port);
    if (!n || *n < 0 || *n > 65535) {
      p.Add(fmt::format("--health-check-port: expected a port 0-65535 (0: a free one), got '{}'",
                        health_port));
    } else {
      c.health_check_port = static_cast<int>(*n);
    }
  }
  if (given("health_check_addr")) {
    c.health_check_addr = value("health_check_addr");
    if (health_port.empty()) {
      p.Add("--health-check-addr needs --health-check-port (or TORCHELASTIC_HEALTH_CHECK_PORT)");
    }
  }
  // torch's LocalElasticAgent starts its watchdog for exactly "1".
  c.file_timer = Env("TORCHELASTIC_ENABLE_FILE_TIMER") == "1";
  c.timer_file = Env("TORCHELASTIC_TIMER_FILE");
  if (given("role")) c.role = value("role");

  // torchrun's config_from_args: --run-path wins over -m and --no-python
  // (its help says so), and only without it are those two a conflict.
  bool module = flags["module"], no_python = flags["no_python"], run_path = flags["run_path"];
  if (!run_path && module && no_python) {
    p.Add("--no-python and -m/--module cannot be used together: a module needs python");
  }
  c.entrypoint_kind = run_path    ? EntrypointKind::kRunPath
                      : no_python ? EntrypointKind::kBinary
                      : module    ? EntrypointKind::kModule
                                  : EntrypointKind::kScript;

  // torchrun's `args.log_dir or mkdtemp()`: an empty --log-dir is none.
  if (given("log_dir") && !value("log_dir").empty()) {
    c.log_dir = value("log_dir");
    PrepareLogDir(*c.log_dir, p);
  }
  if (given("redirects")) {
    auto s = ParseStdSpec("--redirects", value("redirects"));
    if (s.ok())
      c.redirects = *s;
    else
      p.Add(s.status().message());
  }
  if (given("tee")) {
    auto s = ParseStdSpec("--tee", value("tee"));
    if (s.ok())
      c.tee = *s;
    else
      p.Add(s.status().message());
  }
  // torchrun: the flag (or PET_) when non-empty, else the environment's.
  c.log_line_prefix_template = !value("log_line_prefix_template").empty()
                                   ? value("log_line_prefix_template")
                                   : Env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  if (given("duplicate_stdout_filters")) {
    c.duplicate_stdout_filters = SplitFilters(value("duplicate_stdout_filters"));
  }
  if (given("duplicate_stderr_filters")) {
    c.duplicate_stderr_filters = SplitFilters(value("duplicate_stderr_filters"));
  }
  if ((!c.duplicate_stdout_filters.empty() || !c.duplicate_stderr_filters.empty()) &&
      c.log_dir == "/dev/null") {
    p.Add(
        "--duplicate-stdout-filters/--duplicate-stderr-filters write filtered_*.log into the log "
        "dir, but --log-dir /dev/null keeps no files; give a real --log-dir or drop the filters");
  }
  // torchrun: an empty filter is none; any integer is a local rank to show,
  // so one that no worker has (-1, or past --nproc-per-node) shows nobody,
  // which is how some scripts silence the console.
  if (given("local_ranks_filter") && !value("local_ranks_filter").empty()) {
    std::set<int> ranks;
    bool bad = false;
    for (auto& r : Split(value("local_ranks_filter"), ',')) {
      auto n = ParsePythonInt(r);
      if (!n)
        bad = true;
      else if (*n >= 0 && *n <= std::numeric_limits<int>::max())
        ranks.insert(static_cast<int>(*n));
    }
    if (bad) {
      p.Add(fmt::format(
          "--local-ranks-filter: expected comma-separated local ranks like 0,1, got '{}'",
          value("local_ranks_filter")));
    } else {
      c.local_ranks_filter = std::move(ranks);
    }
  }
  // torchrun takes any whole number: a backend other than static ignores
  // it, and static admits no rank outside 0..nodes-1, so such a node waits
  // (both warned below). Beyond int's range is as far outside.
  if (given("node_rank")) {
    if (auto n = ParsePythonInt(value("node_rank")); !n) {
      p.Add(fmt::format("--node-rank: expected a whole number, got '{}'", value("node_rank")));
    } else {
      c.node_rank = static_cast<int>(std::clamp<long long>(*n, std::numeric_limits<int>::min(),
                                                           std::numeric_limits<int>::max()));
    }
  }
  if (given("master_addr")) c.master_addr = value("master_addr");
  // Any whole number, as torchrun's type=int: only the static backend's
  // store reads it, and checks it there (below).
  std::optional<long long> master_port;
  if (given("master_port")) {
    master_port = ParsePythonInt(value("master_port"));
    if (!master_port) {
      p.Add(fmt::format("--master-port: expected a port 0-65535, got '{}'", value("master_port")));
    }
    c.master_port_given = true;
  }
  if (given("local_addr")) c.local_addr = value("local_addr");
  // torchrun loads --logs-specs from the torchrun.logs_specs entry points;
  // torch registers one, `default` (DefaultLogsSpecs), the layout trun writes.
  if (given("logs_specs") && value("logs_specs") != "default") {
    p.Add(fmt::format(
        "--logs-specs '{}': trun supports only torch's entry point 'default' (DefaultLogsSpecs, "
        "the log layout trun writes); torchrun's Python plug-ins cannot load into trun, so drop "
        "the flag or give --logs-specs default",
        value("logs_specs")));
  }
  if (given("numa_binding")) {
    c.numa_binding = value("numa_binding");
    if (!ParseNumaMode(*c.numa_binding)) {
      p.Add(
          fmt::format("--numa-binding: expected node, socket, exclusive or core-complex, got '{}'",
                      *c.numa_binding));
    }
  }
  std::string signals =
      given("signals_to_handle") ? value("signals_to_handle") : "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  for (auto& name : Split(signals, ',')) {
    auto sig = proc::ParseSignal(name);
    if (!sig) {
      // torch's start_processes warns and handles the others.
      log::Warning("--signals-to-handle: '{}' is no signal; trun skips it, as torchrun does", name);
    } else if (*sig == SIGKILL || *sig == SIGSTOP) {
      // torchrun accepts them and fails as it starts the workers, where
      // setting their handler raises (CheckBeforeStart).
      c.unhandleable_signals.push_back(std::string(Trim(name)));
    } else if (*sig == SIGCHLD) {
      // Every worker exit sends it: torchrun's handler ends the job at the
      // first one, and so does trun's agent.
      c.end_at_first_worker_exit = true;
    } else {
      c.signals_to_handle.push_back(*sig);
    }
  }

  // Rendezvous: the backends exist to join nodes, and one node needs none.
  static const std::set<std::string> kBackends = {"static", "c10d", "etcd", "etcd-v2"};
  if (!kBackends.count(c.rdzv_backend)) {
    p.Add(fmt::format("--rdzv-backend: expected static, c10d, etcd or etcd-v2, got '{}'",
                      c.rdzv_backend));
  }
  // torchrun 2.x runs a one-node static job that names no address for its
  // store (no --rdzv-endpoint, no --master-port) as --standalone: a free
  // port and a run id of its own, so two such jobs never meet.
  const bool implied_standalone = !c.standalone && c.rdzv_backend == "static" && c.max_nodes == 1 &&
                                  c.rdzv_endpoint.empty() && !c.master_port_given;
  if (implied_standalone) c.standalone = true;
  if (c.standalone) {
    // torchrun keeps --nnodes: with MIN 1 its lone node starts after the
    // last call, with MIN above 1 it waits until the join timeout on a port
    // no other node knows. trun decides as torchrun does, and says so.
    if (c.max_nodes > 1) {
      log::Warning(
          "--standalone with --nnodes {}:{}: no other node can reach a standalone store (a free "
          "port on localhost), so this node {}, as torchrun's does; drop --nnodes to start at "
          "once, or rendezvous several nodes with --rdzv-backend c10d --rdzv-endpoint HOST:PORT",
          c.min_nodes, c.max_nodes,
          c.min_nodes > 1 ? "waits for the others until the join timeout"
                          : "starts alone after the last call");
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    // torchrun 2.x replaces a given --rdzv-id here, implied standalone
    // included: two such jobs never share a round.
    c.rdzv_id = RandomUuid4();
  }
  // torch's static rendezvous takes MAX as its world size and waits for
  // that many nodes, whatever MIN says; so does trun (the rendezvous reads
  // MAX, rendezvous.cc), while the config keeps MIN as torch's does.
  if (c.rdzv_backend == "static" && c.min_nodes != c.max_nodes) {
    log::Warning(
        "--nnodes {}:{}: the static backend waits for all {} nodes (an elastic job needs "
        "--rdzv-backend c10d)",
        c.min_nodes, c.max_nodes, c.max_nodes);
  }
  // torch accepts any node rank and its static rendezvous then waits for a
  // store or a slot that never comes, until its timeout; trun decides the
  // same and names the mistake at once.
  if (c.rdzv_backend == "static" && (c.node_rank < 0 || c.node_rank >= c.max_nodes)) {
    log::Warning(
        "--node-rank {} is outside 0..{} for --nnodes {}: the static backend admits no such node, "
        "so this agent waits until the join timeout, as torchrun's does; give each node a rank "
        "from 0 to {}",
        c.node_rank, c.max_nodes - 1, c.max_nodes, c.max_nodes - 1);
  }
  // torchrun passes --node-rank to the static backend alone; the others
  // order nodes themselves and never read it.
  if (c.rdzv_backend != "static" && c.node_rank != 0) {
    if (user_given("node_rank")) {
      log::Warning(
          "--node-rank {} is ignored: only the static backend reads it, and this job's is {}",
          c.node_rank, c.rdzv_backend);
    }
    c.node_rank = 0;
  }
  // torch's static store is at --rdzv-endpoint when given, else at
  // "{master_addr}:{master_port}"; either must hold a port 0-65535
  // (launch_agent's _get_addr_and_port), and that is the workers'
  // MASTER_ADDR and MASTER_PORT. The other backends never read the port.
  if (c.rdzv_backend == "static" && c.rdzv_endpoint.empty()) {
    if (master_port && (*master_port < 0 || *master_port > 65535)) {
      p.Add(fmt::format(
          "--master-port: expected a port 0-65535 for the static backend's store, got '{}' "
          "(torchrun refuses it too)",
          value("master_port")));
    } else if (master_port) {
      c.master_port = static_cast<int>(*master_port);
    }
    // torch parses "{master_addr}:{master_port}" as an endpoint: stripped
    // (spaces before the address go; spaces after it stay in the host, which
    // is then refused), brackets around an IPv6 address off, and it must be
    // a host.
    c.rdzv_endpoint = fmt::format("{}:{}", c.master_addr, c.master_port);
    std::string_view addr = LStripAsStr(c.master_addr);
    if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']') {
      addr = addr.substr(1, addr.size() - 2);
    }
    if (std::string why = HostProblem(addr); !why.empty()) {
      p.Add(fmt::format(
          "--master-addr '{}': {}; give the host of node 0, which serves the static backend's "
          "store (torchrun refuses it too)",
          c.master_addr, why));
    } else {
      c.master_addr = std::string(addr);
    }
  } else if (c.rdzv_backend == "static") {
    Problems bad;
    rendezvous::Settings at;
    SplitEndpoint(c.rdzv_endpoint, -1, at, bad);
    for (const auto& m : bad.messages()) p.Add(m);
    if (bad.empty() && at.endpoint_port < 0) {
      p.Add(fmt::format(
          "--rdzv-endpoint '{}': the static backend needs the store's port (HOST:PORT), as "
          "torchrun's does; or leave --rdzv-endpoint out and give --master-addr and --master-port",
          c.rdzv_endpoint));
    } else if (bad.empty()) {
      c.master_addr = at.endpoint_host;
      c.master_port = at.endpoint_port;
      c.master_port_given = true;
    }
  }
  if (c.rdzv_backend == "static" && c.master_port_given && c.master_port == 0 && c.max_nodes > 1) {
    log::Warning(
        "--master-port 0: node 0's store listens on a free port that no other node knows, as "
        "under torchrun; give every node the same port (e.g. --master-port 29500)");
  }
  for (const auto& w : RdzvConfWarnings(rdzv_conf, c)) log::Warning("{}", w);
  c.rdzv = ParseRdzvSettings(rdzv_conf, c, p);
  // trun's own store guards its keys (/trun/) with the job token. A
  // standalone agent, or the one agent a job of one node admits, shares that
  // store with no other agent, so a token of its own costs nothing and keeps
  // every other local process out of its rounds; the workers' keys (torch's)
  // never needed one. A job of several nodes needs the same token on every
  // agent, which only its user can give.
  const bool trun_store = c.rdzv_backend == "static" || c.rdzv_backend == "c10d";
  if ((c.standalone || (trun_store && c.max_nodes == 1)) && c.rdzv.job_token.empty()) {
    c.rdzv.job_token = store::NewJobToken();
    c.rdzv.job_token_own = true;
  } else if (trun_store && c.max_nodes > 1 && c.rdzv.job_token.empty()) {
    log::Warning(
        "this job of up to {} nodes has no job token: any process that reaches its rendezvous "
        "store can join or end its rounds; give every agent the same TRUN_JOB_TOKEN "
        "(docs/cli.md, \"The job token\")",
        c.max_nodes);
  }

  // torchrun: --shutdown-timeout (whole seconds) when given, else
  // TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30.
  std::string shutdown = Env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (given("shutdown_timeout")) {
    shutdown.clear();
    if (auto n = ParseNonNegative("--shutdown-timeout", value("shutdown_timeout"), p,
                                  std::numeric_limits<int>::max())) {
      c.shutdown_timeout_s = *n;
    }
  }
  // torch's LaunchConfig reads the variable with int() and checks only the
  // flag's sign: a negative value is no grace at all.
  if (!shutdown.empty()) {
    auto n = ParsePythonInt(shutdown);
    if (!n) {
      p.Add(fmt::format(
          "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: expected whole seconds, got '{}' (torchrun refuses it "
          "too)",
          shutdown));
    } else {
      c.shutdown_timeout_s = static_cast<double>(std::max(*n, 0LL));
    }
  }
  c.virtual_local_rank = flags["virtual_local_rank"];
  if (c.virtual_local_rank) {
    // torch's LocalElasticAgent: local rank i gets the i-th entry of the
    // agent's CUDA_VISIBLE_DEVICES (split on commas, trimmed), or "i" when it
    // is unset. torch finds a short list only when it starts the workers;
    // so does trun (CheckBeforeStart).
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    std::vector<std::string> listed = visible ? Split(visible, ',') : std::vector<std::string>{};
    // No more than the kernel could ever run (its PID_MAX_LIMIT): a larger
    // count fails as the workers start (CheckBeforeStart).
    const int devices = std::min(c.nproc_per_node, 4 * 1024 * 1024);
    for (int lr = 0; lr < devices; ++lr) {
      if (!visible) {
        c.virtual_devices.push_back(std::to_string(lr));
      } else if (static_cast<size_t>(lr) < listed.size()) {
        c.virtual_devices.emplace_back(Trim(listed[static_cast<size_t>(lr)]));
      }
    }
  }
  c.set_omp_num_threads = std::getenv("OMP_NUM_THREADS") == nullptr && c.nproc_per_node > 1;

  if (!c.training_script.empty()) BuildEntrypoint(c);
  if (!p.empty()) return p.ToStatus();
  return ParsedLaunch{LaunchAction::kRun, "", std::move(c), ""};
}

Status CheckBeforeStart(const LaunchConfig& c) {
  Problems p;
  for (const auto& name : c.unhandleable_signals) {
    p.Add(fmt::format(
        "--signals-to-handle: no handler can be set for {} (the kernel does not allow it), so "
        "the workers are not started; torchrun fails here too (OSError); leave {} out",
        name, name));
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const size_t listed = visible ? Split(visible, ',').size() : 0;
  if (c.virtual_local_rank && visible && listed < static_cast<size_t>(c.nproc_per_node)) {
    p.Add(fmt::format(
        "--virtual-local-rank: {} workers per node, but CUDA_VISIBLE_DEVICES={} lists only {} "
        "device(s), so the workers are not started; torchrun fails here too (ValueError); list "
        "one device per worker or lower --nproc-per-node",
        c.nproc_per_node, visible, listed));
  }
  // torchrun would start them until the kernel refuses a process; trun
  // says so before the first.
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  long long pid_max = 0;
  if (pid_max_file >> pid_max && c.nproc_per_node > pid_max) {
    p.Add(
        fmt::format("--nproc-per-node {}: more workers than this machine can have processes "
                    "(kernel.pid_max is {}), so none is started; lower --nproc-per-node",
                    c.nproc_per_node, pid_max));
  }
  return p.ToStatus();
}

}  // namespace trun::launch
