#include "components/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "common/log.h"
#include "common/strings.h"
#include "components/file_component.h"
#include "components/python_component.h"
#include "specs/macros.h"
#include "specs/mounts.h"
#include "specs/named_resources.h"
#include "specs/runopts.h"

namespace trun::components {
namespace {

using specs::AppDef;
using specs::CfgValue;
using specs::Role;

Param Opt(std::string name, ParamType type, std::string help, CfgValue def = {}) {
  return Param{std::move(name), type, std::move(help), std::move(def), false, {}};
}
Param Req(std::string name, ParamType type, std::string help) {
  return Param{std::move(name), type, std::move(help), {}, true, {}};
}
Param Args(std::string name, std::string help) {
  return Param{std::move(name), ParamType::kVarArgs, std::move(help), {}, false, {}};
}

// The environment a debugging run wants (TorchX's _TORCH_DEBUG_FLAGS).
const std::map<std::string, std::string> kTorchDebugFlags = {
    {"CUDA_LAUNCH_BLOCKING", "1"},
    {"NCCL_DESYNC_DEBUG", "1"},
    {"TORCH_DISTRIBUTED_DEBUG", "DETAIL"},
    {"TORCH_SHOW_CPP_STACKTRACES", "1"},
};

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

Result<std::vector<specs::Mount>> Mounts(const ComponentArgs& a) {
  if (a.IsNone("mounts")) return std::vector<specs::Mount>{};
  return specs::ParseMounts(a.List("mounts"));
}

Result<specs::Resource> ResourceOf(const ComponentArgs& a) {
  return specs::MakeResource(static_cast<int>(a.Int("cpu")), static_cast<int>(a.Int("gpu")),
                             static_cast<int>(a.Int("memMB")), a.Str("h"));
}

// "exp/run", "exp/", "/run" or "run": the experiment and run names, the run
// defaulting to the script's stem or the module's last part.
std::pair<std::string, std::string> ExperimentAndRun(const std::string& name,
                                                     const std::string& fallback_run) {
  std::string experiment, run;
  size_t slash = name.find('/');
  if (slash == std::string::npos) {
    run = name;
  } else {
    run = name.substr(slash + 1);
    experiment = name.substr(0, slash);
  }
  if (run.empty()) run = fallback_run;
  if (experiment.empty()) experiment = "default-experiment";
  return {experiment, run};
}

// pathlib's Path(script).stem, or the module's last component.
std::string RoleName(const std::string& script, const std::string& module) {
  if (!script.empty()) {
    std::string base = script.substr(script.find_last_of('/') + 1);
    size_t dot = base.rfind('.');
    return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
  }
  return module.substr(module.find_last_of('.') + 1);
}

// A word of a shell command that is not quoted, so the shell expands it.
struct Word {
  std::string text;
  bool quote = true;
};

std::string JoinCommand(const std::vector<Word>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : " ") + (w.quote ? ShellQuote(w.text) : w.text);
  return out;
}

Result<AppDef> Ddp(const ComponentArgs& a, const std::string& trun) {
  if (a.IsNone("script") == a.IsNone("m")) {
    return Status::InvalidArgument("exactly one of --script and -m must be given");
  }
  const std::string script = a.Str("script"), module = a.Str("m");
  auto j = ParseJ(a.Str("j"));
  if (!j.ok()) return j.status();
  long long port = a.Int("rdzv_port");
  if (port < 1 || port > 65535) {
    return Status::InvalidArgument(fmt::format("--rdzv_port: expected 1-65535, got {}", port));
  }
  long long tee = a.Int("tee");
  if (tee < 0 || tee > 3) {
    return Status::InvalidArgument(
        fmt::format("--tee: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), got {}", tee));
  }
  const std::string backend = a.Str("rdzv_backend");
  // One node: the agent picks a free port. Several: the first replica's
  // host, named by the scheduler's rank0 variable, which bash expands
  // ("$$" keeps a literal "$" through macro substitution).
  const std::string rank0_host = fmt::format("$${{{}:=localhost}}", specs::kMacroRank0Env);
  Word endpoint{j->max_nodes == 1 ? "localhost:0" : fmt::format("{}:{}", rank0_host, port),
                j->max_nodes == 1};
  auto [experiment, run] = ExperimentAndRun(a.Str("name"), RoleName(script, module));

  std::map<std::string, std::string> env = a.Dict("env");
  env["TORCHX_TRACKING_EXPERIMENT_NAME"] = experiment;
  env["TORCHX_TRACKING_RUN_NAME"] = run;
  env.emplace("LOGLEVEL", EnvOr("LOGLEVEL", "WARNING"));
  if (a.Bool("debug")) {
    for (const auto& [k, v] : kTorchDebugFlags) env[k] = v;
  }

  std::vector<Word> cmd = {{trun}, {"--rdzv_backend"}, {backend}};
  if (!a.IsNone("rdzv_conf")) {
    cmd.push_back({"--rdzv_conf"});
    cmd.push_back({a.Str("rdzv_conf")});
  }
  cmd.push_back({"--rdzv_endpoint"});
  cmd.push_back(endpoint);
  for (const std::string& w :
       {std::string("--rdzv_id"), std::string(specs::kMacroAppId), std::string("--nnodes"),
        j->nnodes, std::string("--nproc_per_node"), std::to_string(j->nproc_per_node),
        std::string("--tee"), std::to_string(tee), std::string("--role"), std::string()}) {
    cmd.push_back({w});
  }
  if (backend == "static") {
    cmd.push_back({"--node_rank"});
    cmd.push_back({std::string(specs::kMacroReplicaId)});
    if (j->max_nodes > 1) {
      // trun's static backend finds node 0 by --master_addr/--master_port.
      cmd.push_back({"--master_addr"});
      cmd.push_back({rank0_host, false});
      cmd.push_back({"--master_port"});
      cmd.push_back({std::to_string(port)});
    }
  }
  if (!script.empty()) {
    cmd.push_back({script});
  } else {
    cmd.push_back({"-m"});
    cmd.push_back({module});
  }
  for (const auto& arg : a.varargs) cmd.push_back({arg});

  auto resource = ResourceOf(a);
  if (!resource.ok()) return resource.status();
  auto mounts = Mounts(a);
  if (!mounts.ok()) return mounts.status();
  Role role;
  role.name = RoleName(script, module);
  role.image = a.Str("image");
  role.min_replicas = j->min_nodes;
  role.entrypoint = "bash";
  role.num_replicas = j->max_nodes;
  role.resource = *resource;
  role.args = {"-c", JoinCommand(cmd)};
  role.env = std::move(env);
  role.port_map = {{"c10d", static_cast<int>(port)}};
  role.max_retries = static_cast<int>(a.Int("max_retries"));
  role.mounts = std::move(*mounts);
  role.metadata[specs::kJobTokenRoleKey] = true;
  return AppDef{run, {std::move(role)}, a.Dict("metadata")};
}

// `-j NODES` on the named host `h`: one process per GPU of it, so NODES x
// its GPUs; a host without GPUs leaves the count to the user.
Result<long long> GpusPerNode(const std::string& nodes, const std::string& h,
                              const specs::Resource& host) {
  if (host.gpu > 0) return static_cast<long long>(host.gpu);
  return Status::InvalidArgument(
      fmt::format("-j {}: the processes per node cannot be taken from the GPU count, '{}' "
                  "has no GPUs; give -j {}xNPROC",
                  nodes, h, nodes));
}

Result<AppDef> Spmd(const ComponentArgs& a, const std::string& trun) {
  const std::string h = a.Str("h");
  auto host = specs::NamedResource(h);
  if (!host.ok()) return Status::InvalidArgument("-h: " + host.status().message());
  const std::string j = a.Str("j");
  auto parts = Split(j, 'x');
  std::optional<long long> nnodes = ParseInt(parts[0]);
  if (parts.size() > 2 || !nnodes || (parts.size() == 2 && !ParseInt(parts[1]))) {
    return Status::InvalidArgument(
        fmt::format("-j: expected NNODES or NNODESxNPROC_PER_NODE (e.g. -j 1x8), got '{}'", j));
  }
  long long nproc = 0;
  if (parts.size() == 1) {
    auto gpus = GpusPerNode(std::to_string(*nnodes), h, *host);
    if (!gpus.ok()) return gpus.status();
    nproc = *gpus;
  } else {
    nproc = *ParseInt(parts[1]);
    if (nproc != host->gpu) {
      log::Warning("-j {}: {} processes per node, but a {} has {} GPUs; -j {} uses one per GPU", j,
                   nproc, h, host->gpu, *nnodes);
    }
  }
  ComponentArgs ddp = a;
  ddp.values["j"] = fmt::format("{}x{}", *nnodes, nproc);
  ddp.values["cpu"] = 2LL;
  ddp.values["gpu"] = 0LL;
  ddp.values["memMB"] = 1024LL;
  ddp.values["rdzv_port"] = 29500LL;
  ddp.values["rdzv_backend"] = std::string("c10d");
  ddp.values["rdzv_conf"] = CfgValue();
  ddp.values["tee"] = 3LL;
  return Ddp(ddp, trun);
}

// TorchX's newer dist.torchrun: dist.ddp's arguments and defaults, except
// that with a named host (-h) a bare -j (`2`, `1:4`) counts nodes, each
// running one process per GPU of the host, as dist.spmd reads it; without
// one (an empty -h is none, as in dist.ddp), -j N is N processes on one
// node, as dist.ddp reads it.
Result<AppDef> Torchrun(const ComponentArgs& a, const std::string& trun) {
  const std::string j = a.Str("j"), h = a.Str("h");
  if (h.empty() || j.find('x') != std::string::npos) return Ddp(a, trun);
  static const std::regex kNodes(R"(\d+(:\d+)?)");
  if (!std::regex_match(j, kNodes)) {
    return Status::InvalidArgument(fmt::format(
        "-j: with -h, expected [MIN:]NODES or [MIN:]NODESxNPROC, e.g. 2, 1:4 or 2x8, got '{}'", j));
  }
  // The nodes' range first, then the host's GPUs.
  if (!ParseJ(j + "x1").ok()) {
    return Status::InvalidArgument(
        fmt::format("-j {}: needs 1 <= MIN <= MAX <= {} nodes", j, kMaxJ));
  }
  auto host = specs::NamedResource(h);
  if (!host.ok()) return Status::InvalidArgument("-h: " + host.status().message());
  auto gpus = GpusPerNode(j, h, *host);
  if (!gpus.ok()) return gpus.status();
  ComponentArgs nodes = a;
  nodes.values["j"] = fmt::format("{}x{}", j, *gpus);
  return Ddp(nodes, trun);
}

Role SimpleRole(std::string name, std::string image, std::string entrypoint,
                std::vector<std::string> args) {
  Role r;
  r.name = std::move(name);
  r.image = std::move(image);
  r.entrypoint = std::move(entrypoint);
  r.args = std::move(args);
  r.resource.cpu = 1;
  r.resource.gpu = 0;
  r.resource.mem_mb = 1024;
  return r;
}

Result<AppDef> Sh(const ComponentArgs& a) {
  std::vector<std::string> quoted;
  for (const auto& arg : a.varargs) quoted.push_back(ShellQuote(arg));
  std::map<std::string, std::string> env = a.Dict("env");
  env.emplace("LOGLEVEL", EnvOr("LOGLEVEL", "WARNING"));
  Role r = SimpleRole("sh", a.Str("image"), "sh", {});
  if (!a.IsNone("entrypoint")) {
    r.entrypoint = a.Str("entrypoint");
    r.args = quoted;
  } else {
    std::string joined;
    for (const auto& q : quoted) joined += (joined.empty() ? "" : " ") + q;
    r.args = {"-c", joined};
  }
  auto resource = ResourceOf(a);
  if (!resource.ok()) return resource.status();
  auto mounts = Mounts(a);
  if (!mounts.ok()) return mounts.status();
  r.num_replicas = static_cast<int>(a.Int("num_replicas"));
  r.resource = *resource;
  r.env = std::move(env);
  r.max_retries = static_cast<int>(a.Int("max_retries"));
  r.mounts = std::move(*mounts);
  return AppDef{"sh", {std::move(r)}, {}};
}

Result<AppDef> Python(const ComponentArgs& a) {
  int given = !a.IsNone("m") + !a.IsNone("c") + !a.IsNone("script");
  if (given != 1)
    return Status::InvalidArgument("exactly one of -m, -c and --script must be given");
  std::vector<std::string> cmd;
  if (!a.IsNone("script")) {
    cmd = {a.Str("script")};
  } else if (!a.IsNone("m")) {
    cmd = {"-m", a.Str("m")};
  } else {
    cmd = {"-c", a.Str("c")};
  }
  cmd.insert(cmd.end(), a.varargs.begin(), a.varargs.end());
  auto resource = ResourceOf(a);
  if (!resource.ok()) return resource.status();
  auto mounts = Mounts(a);
  if (!mounts.ok()) return mounts.status();
  Role r = SimpleRole("python", a.Str("image"), "python3", cmd);
  r.num_replicas = static_cast<int>(a.Int("num_replicas"));
  r.resource = *resource;
  if (!a.IsNone("m")) r.env["HYDRA_MAIN_MODULE"] = a.Str("m");
  r.mounts = std::move(*mounts);
  return AppDef{a.Str("name"), {std::move(r)}, {}};
}

Result<AppDef> Binary(const ComponentArgs& a) {
  auto resource = ResourceOf(a);
  if (!resource.ok()) return resource.status();
  Role r = SimpleRole("binary", std::string(specs::kNone), a.Str("entrypoint"), a.varargs);
  r.num_replicas = static_cast<int>(a.Int("num_replicas"));
  r.resource = *resource;
  return AppDef{a.Str("name"), {std::move(r)}, {}};
}

// utils.copy's program: fsspec URLs when fsspec is there, else local paths.
constexpr const char* kCopyProgram =
    "import shutil, sys\n"
    "src, dst = sys.argv[1], sys.argv[2]\n"
    "try:\n"
    "    import fsspec\n"
    "except ImportError:\n"
    "    fsspec = None\n"
    "if fsspec is not None:\n"
    "    with fsspec.open(src, 'rb') as i, fsspec.open(dst, 'wb') as o:\n"
    "        shutil.copyfileobj(i, o)\n"
    "else:\n"
    "    strip = lambda p: p[len('file://'):] if p.startswith('file://') else p\n"
    "    shutil.copyfile(strip(src), strip(dst))\n";

Result<AppDef> Copy(const ComponentArgs& a) {
  auto mounts = Mounts(a);
  if (!mounts.ok()) return mounts.status();
  Role r = SimpleRole("trun-utils-copy", a.Str("image"), "python3",
                      {"-c", kCopyProgram, a.Str("src"), a.Str("dst")});
  r.mounts = std::move(*mounts);
  return AppDef{"trun-utils-copy", {std::move(r)}, {}};
}

// TorchX's utils.booth: its app and arguments, with trun's module (floats
// spelled as Python's str() does, as TorchX's component passes them).
Result<AppDef> Booth(const ComponentArgs& a) {
  Role r = SimpleRole(
      "trun-utils-booth", a.Str("image"), "python3",
      {"-m", "trun.apps.utils.booth_main", "--x1", specs::CfgValueToString(CfgValue(a.Float("x1"))),
       "--x2", specs::CfgValueToString(CfgValue(a.Float("x2"))), "--trial_idx",
       std::to_string(a.Int("trial_idx")), "--tracker_base", a.Str("tracker_base")});
  return AppDef{"trun-utils-booth", {std::move(r)}, {}};
}

std::vector<Param> ResourceParams(long long cpu) {
  return {Opt("cpu", ParamType::kInt, "number of cpus per replica", cpu),
          Opt("gpu", ParamType::kInt, "number of gpus per replica", 0LL),
          Opt("memMB", ParamType::kInt, "cpu memory in MB per replica", 1024LL),
          Opt("h", ParamType::kStr,
              "a named resource, e.g. gpu.small or aws_p4d.24xlarge (takes precedence over cpu, "
              "gpu, memMB)")};
}

const char* kMountsHelp =
    "mounts into the worker environment/container, e.g. type=bind,src=/host,dst=/job[,readonly] "
    "(schedulers without containers ignore them)";

}  // namespace

std::string DefaultImage() { return "trun:" TRUN_VERSION; }

Result<JSpec> ParseJ(std::string_view j) {
  static const std::regex kElastic(R"((\d+):(\d+)x(\d+))");
  static const std::regex kFixed(R"((\d+)x(\d+))");
  static const std::regex kOneNode(R"(\d+)");
  std::string s(j);
  std::smatch m;
  JSpec out;
  // A count beyond kMaxJ (or beyond a long long) is refused below, not
  // clamped: --nnodes gets the text as written.
  auto num = [](const std::string& x) {
    auto n = ParseInt(x);
    return n && *n <= kMaxJ ? static_cast<int>(*n) : kMaxJ + 1;
  };
  if (std::regex_match(s, m, kElastic)) {
    out.min_nodes = num(m.str(1));
    out.max_nodes = num(m.str(2));
    out.nproc_per_node = num(m.str(3));
    out.nnodes = m.str(1) + ":" + m.str(2);
  } else if (std::regex_match(s, m, kFixed)) {
    out.min_nodes = out.max_nodes = num(m.str(1));
    out.nproc_per_node = num(m.str(2));
    out.nnodes = m.str(1);
  } else if (std::regex_match(s, kOneNode)) {
    out.nproc_per_node = num(s);
    out.nnodes = "1";
  } else {
    return Status::InvalidArgument(
        fmt::format("-j: expected [MIN:]MAXxNPROC or NPROC, e.g. 1:2x4, 2x4 or 4, got '{}'", j));
  }
  if (out.max_nodes > kMaxJ || out.min_nodes > kMaxJ || out.nproc_per_node > kMaxJ) {
    return Status::InvalidArgument(
        fmt::format("-j {}: at most {} nodes and {} processes per node", j, kMaxJ, kMaxJ));
  }
  if (out.min_nodes < 1 || out.max_nodes < out.min_nodes || out.nproc_per_node < 1) {
    return Status::InvalidArgument(
        fmt::format("-j {}: needs 1 <= MIN <= MAX nodes and at least 1 process per node", j));
  }
  return out;
}

std::vector<Component> Builtins(const std::string& trun_path) {
  std::vector<Component> out;
  const CfgValue image = DefaultImage();

  std::vector<Param> ddp_params = {
      Args("script_args", "arguments to the main module or script"),
      Opt("script", ParamType::kStr, "script or binary to run within the image"),
      Opt("m", ParamType::kStr, "the python module path to run"),
      Opt("image", ParamType::kStr, "image (e.g. docker)", image),
      Opt("name", ParamType::kStr,
          "job name override: {experimentname}/{runname}, {experimentname}/, /{runname} or "
          "{runname}; the run name defaults to the script or module name",
          std::string("/"))};
  auto res = ResourceParams(2);
  ddp_params.insert(ddp_params.end(), res.begin(), res.end());
  for (Param p :
       {Opt("j", ParamType::kStr,
            "[{min_nnodes}:]{nnodes}x{nproc_per_node}; for gpu hosts, nproc_per_node must not "
            "exceed the GPUs",
            std::string("1x2")),
        Opt("env", ParamType::kDict, "environment variables, e.g. ENV1=v1,ENV2=v2"),
        Opt("metadata", ParamType::kDict, "metadata for the scheduler, e.g. KEY1=v1,KEY2=v2"),
        Opt("max_retries", ParamType::kInt, "the number of scheduler retries allowed", 0LL),
        Opt("rdzv_port", ParamType::kInt,
            "the port on rank0's host for the c10d store (multi-node only; one node picks a "
            "free port)",
            29500LL),
        Opt("rdzv_backend", ParamType::kStr, "the rendezvous backend (multi-node only)",
            std::string("c10d")),
        Opt("rdzv_conf", ParamType::kStr,
            "more rendezvous settings, e.g. join_timeout=600,close_timeout=600"),
        Opt("mounts", ParamType::kList, kMountsHelp),
        Opt("debug", ParamType::kBool, "run with torch's debug flags", false),
        Opt("tee", ParamType::kInt,
            "streams teed to the console and the files: 0 none, 1 stdout, 2 stderr, 3 both",
            3LL)}) {
    ddp_params.push_back(std::move(p));
  }
  out.push_back({"dist.ddp",
                 "distributed data parallel: N replicas x M workers under trun's elastic agent",
                 "Distributed data parallel style application (one role, multi-replica). Each "
                 "replica runs\ntrun's elastic agent with torchrun's flags; replicas rendezvous "
                 "with c10d on the first\nreplica's host at --rdzv_port.",
                 ddp_params, [trun_path](const ComponentArgs& a) { return Ddp(a, trun_path); }});

  std::vector<Param> spmd_params = {
      Args("args", "the arguments to the main module or script"),
      Opt("script", ParamType::kStr, "the main script"),
      Opt("m", ParamType::kStr, "the main module name (python -m)"),
      Opt("image", ParamType::kStr, "the image of the job", image),
      Opt("name", ParamType::kStr, "{experimentname}/{runname}, or parts of it", std::string("/")),
      Opt("h", ParamType::kStr, "the type of host, a named resource", std::string("gpu.small")),
      Opt("j", ParamType::kStr,
          "{nnodes}x{nproc_per_node}; {nnodes} alone takes nproc_per_node from the host's GPUs",
          std::string("1x1")),
      Opt("env", ParamType::kDict, "environment variables, e.g. ENV1=v1,ENV2=v2"),
      Opt("metadata", ParamType::kDict, "metadata for the scheduler"),
      Opt("max_retries", ParamType::kInt, "the number of scheduler retries allowed", 0LL),
      Opt("mounts", ParamType::kList, kMountsHelp),
      Opt("debug", ParamType::kBool, "run with torch's debug flags", false)};
  out.push_back({"dist.spmd",
                 "single program, multiple data: dist.ddp sized by a named resource's GPUs",
                 "Single-Process-Multiple-Data style application: n x m copies of one program "
                 "(-j nxm), n hosts\nand m processes each; -j n alone runs one process per GPU "
                 "of the host type -h.",
                 spmd_params, [trun_path](const ComponentArgs& a) { return Spmd(a, trun_path); }});

  std::vector<Param> torchrun_params = ddp_params;
  for (Param& p : torchrun_params) {
    if (p.name == "j") {
      p.help =
          "[{min_nnodes}:]{nnodes}x{nproc_per_node}; with -h, [{min_nnodes}:]{nnodes} alone "
          "runs one process per GPU of the host; without, {nproc_per_node} alone is one node";
    }
  }
  out.push_back({"dist.torchrun",
                 "dist.ddp whose -j N with a named host (-h) is N nodes of one worker per GPU",
                 "TorchX's newer name for distributed jobs under torchrun's flags: dist.ddp's "
                 "arguments and\ndefaults; with -h, a bare -j counts nodes and each runs one "
                 "process per GPU of the host.",
                 torchrun_params,
                 [trun_path](const ComponentArgs& a) { return Torchrun(a, trun_path); }});

  out.push_back(
      {"utils.binary", "runs a program with arguments",
       "Runs the given program (--entrypoint) with the arguments.",
       [] {
         std::vector<Param> p = {
             Args("args", "arguments passed to the program"),
             Req("entrypoint", ParamType::kStr, "the program to run"),
             Opt("name", ParamType::kStr, "name of the job", std::string("trun_utils_binary")),
             Opt("num_replicas", ParamType::kInt, "number of copies to run", 1LL)};
         auto r = ResourceParams(1);
         p.insert(p.end(), r.begin(), r.end());
         return p;
       }(),
       Binary});

  out.push_back(
      {"utils.booth",
       "evaluates the booth function at (x1, x2), for trying out HPO",
       "Evaluates the booth function, f(x1, x2) = (x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2, with\n"
       "trun's app trun.apps.utils.booth_main (the image must have trun's Python package). The\n"
       "result is TorchX's tracker's: "
       "FsspecResultTracker(tracker_base)[trial_idx][\"booth_eval\"].",
       {Req("x1", ParamType::kFloat, "x1"), Req("x2", ParamType::kFloat, "x2"),
        Opt("trial_idx", ParamType::kInt, "ignore if not running hpo", 0LL),
        Opt("tracker_base", ParamType::kStr,
            "URI of the tracker's base output directory (e.g. s3://foo/bar)",
            std::string("/tmp/torchx-util-booth")),
        Opt("image", ParamType::kStr, "the image that contains the booth app", image)},
       Booth});

  out.push_back({"utils.copy",
                 "copies a file from src to dst (fsspec URLs when fsspec is installed)",
                 "Copies the file src to dst. With fsspec installed both may be any fsspec URL; "
                 "otherwise local\npaths (file:// allowed). Not recursive.",
                 {Req("src", ParamType::kStr, "the source file"),
                  Req("dst", ParamType::kStr, "the destination file"),
                  Opt("image", ParamType::kStr, "the image that has python3", image),
                  Opt("mounts", ParamType::kList, kMountsHelp)},
                 Copy});

  out.push_back({"utils.echo",
                 "echoes a message to stdout",
                 "Echoes a message to stdout (calls echo).",
                 {Opt("msg", ParamType::kStr, "message to echo", std::string("hello world")),
                  Opt("image", ParamType::kStr, "image to use", image),
                  Opt("num_replicas", ParamType::kInt, "number of replicas to run", 1LL)},
                 [](const ComponentArgs& a) -> Result<AppDef> {
                   Role r = SimpleRole("echo", a.Str("image"), "echo", {a.Str("msg")});
                   r.num_replicas = static_cast<int>(a.Int("num_replicas"));
                   return AppDef{"echo", {std::move(r)}, {}};
                 }});

  out.push_back(
      {"utils.python", "runs python3 with a module, a command or a script",
       "Runs python3 with the module (-m), command (-c) or script (--script); use -- to "
       "separate the\ncomponent's arguments from the program's.",
       [] {
         std::vector<Param> p = {
             Args("args", "arguments passed to the program in sys.argv[1:]"),
             Opt("m", ParamType::kStr, "run library module as a script"),
             Opt("c", ParamType::kStr, "program passed as string"),
             Opt("script", ParamType::kStr, ".py script to run"),
             Opt("image", ParamType::kStr, "image to run on", DefaultImage()),
             Opt("name", ParamType::kStr, "name of the job", std::string("trun_utils_python"))};
         auto r = ResourceParams(1);
         p.insert(p.end(), r.begin(), r.end());
         p.push_back(Opt("num_replicas", ParamType::kInt, "number of copies to run", 1LL));
         p.push_back(Opt("mounts", ParamType::kList, kMountsHelp));
         return p;
       }(),
       Python});

  out.push_back(
      {"utils.sh", "runs a command with sh -c",
       "Runs the arguments as one command via sh -c (or with --entrypoint instead of sh).",
       [] {
         std::vector<Param> p = {
             Args("args", "the command and its arguments"),
             Opt("image", ParamType::kStr, "image to use", DefaultImage()),
             Opt("num_replicas", ParamType::kInt, "number of replicas to run", 1LL)};
         auto r = ResourceParams(1);
         p.insert(p.end(), r.begin(), r.end());
         p.push_back(Opt("env", ParamType::kDict, "environment variables, e.g. ENV1=v1,ENV2=v2"));
         p.push_back(
             Opt("max_retries", ParamType::kInt, "the number of scheduler retries allowed", 0LL));
         p.push_back(Opt("mounts", ParamType::kList, kMountsHelp));
         p.push_back(Opt("entrypoint", ParamType::kStr, "the program to run instead of sh -c"));
         return p;
       }(),
       Sh});

  out.push_back({"utils.touch",
                 "creates a file (calls touch)",
                 "Touches a file (calls touch).",
                 {Req("file", ParamType::kStr, "file to create"),
                  Opt("image", ParamType::kStr, "the image to use", image)},
                 [](const ComponentArgs& a) -> Result<AppDef> {
                   return AppDef{"touch",
                                 {SimpleRole("touch", a.Str("image"), "touch", {a.Str("file")})},
                                 {}};
                 }});
  std::sort(out.begin(), out.end(),
            [](const Component& x, const Component& y) { return x.name < y.name; });
  return out;
}

Result<Component> FindComponent(const std::string& name, const std::string& trun_path) {
  auto builtins = Builtins(trun_path);
  for (auto& c : builtins) {
    if (c.name == name) return std::move(c);
  }
  if (IsPythonComponent(name)) return LoadPythonComponent(name, trun_path);
  if (name.ends_with(".py")) {
    return Status::InvalidArgument(fmt::format(
        "component '{}': name the function too, as in TorchX: {}:FUNCTION", name, name));
  }
  bool is_file = name.find('/') != std::string::npos;
  for (const char* ext : {".yaml", ".yml", ".json"}) {
    is_file =
        is_file || (name.size() > std::strlen(ext) &&
                    name.compare(name.size() - std::strlen(ext), std::string::npos, ext) == 0);
  }
  if (is_file) return LoadFileComponent(name);
  std::vector<std::string> names;
  for (const auto& c : builtins) names.push_back(c.name);
  std::string guess = ClosestMatch(name, names);
  return Status::InvalidArgument(fmt::format(
      "no component '{}'{}; `trun builtins` lists the builtins, a component file is given by "
      "its path (./my_component.yaml), a Python component as FILE.py:FUNCTION or "
      "MODULE:FUNCTION",
      name, guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
}

}  // namespace trun::components
