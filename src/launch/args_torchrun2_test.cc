// The flags torchrun 2.x added: --log-line-prefix-template,
// --duplicate-std{out,err}-filters, --shutdown-timeout, --virtual-local-rank,
// --print-completion; and what torch 2.14's argparse and run() decide:
// abbreviations, --node-rank off static, --logs-specs, the event handlers.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <vector>

#include "launch/args.h"

namespace trun::launch {
namespace {

// Sets environment variables for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

Result<ParsedLaunch> ParseTorchrun2Args(std::vector<std::string> args) {
  for (const char* v :
       {"PET_NPROC_PER_NODE", "PET_LOG_LINE_PREFIX_TEMPLATE", "PET_DUPLICATE_STDOUT_FILTERS",
        "PET_DUPLICATE_STDERR_FILTERS", "PET_SHUTDOWN_TIMEOUT", "PET_VIRTUAL_LOCAL_RANK",
        "PET_PRINT_COMPLETION", "PET_NUMA_BINDING", "PET_LOGS_SPECS", "OMP_NUM_THREADS"}) {
    unsetenv(v);
  }
  return ParseLaunchArgs(args);
}

TEST(ArgsTorchrun2Test, LogLinePrefixTemplateFlagBeatsEnvironment) {
  ScopedEnv env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "env:${rank}");
  auto from_env = ParseTorchrun2Args({"--no-python", "true"});
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->config.log_line_prefix_template, "env:${rank}");
  auto dash =
      ParseTorchrun2Args({"--log-line-prefix-template", "flag:${rank}", "--no-python", "true"});
  ASSERT_TRUE(dash.ok());
  EXPECT_EQ(dash->config.log_line_prefix_template, "flag:${rank}");
  auto underscore = ParseTorchrun2Args({"--log_line_prefix_template=u", "--no-python", "true"});
  ASSERT_TRUE(underscore.ok());
  EXPECT_EQ(underscore->config.log_line_prefix_template, "u");
  // torch: `args.log_line_prefix_template or os.getenv(...)`.
  auto empty = ParseTorchrun2Args({"--log-line-prefix-template", "", "--no-python", "true"});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->config.log_line_prefix_template, "env:${rank}");
  ScopedEnv pet("PET_LOG_LINE_PREFIX_TEMPLATE", "pet");
  auto p = ParseLaunchArgs({"--no-python", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config.log_line_prefix_template, "pet");
}

TEST(ArgsTorchrun2Test, DuplicateFiltersSplitAsTorchrun) {
  auto p = ParseTorchrun2Args({"--duplicate-stdout-filters", "apple,or,,ange",
                               "--duplicate_stderr_filters=x", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.duplicate_stdout_filters, (std::vector<std::string>{"apple", "or,ange"}));
  EXPECT_EQ(p->config.duplicate_stderr_filters, std::vector<std::string>{"x"});
  auto odd = ParseTorchrun2Args({"--duplicate-stdout-filters", "a,,,b,", "--no-python", "true"});
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->config.duplicate_stdout_filters, (std::vector<std::string>{"a,", "b", ""}));
  auto none = ParseTorchrun2Args({"--no-python", "true"});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->config.duplicate_stdout_filters.empty());
  EXPECT_TRUE(none->config.duplicate_stderr_filters.empty());
  ScopedEnv pet("PET_DUPLICATE_STDERR_FILTERS", "e1,e2");
  auto env = ParseLaunchArgs({"--no-python", "true"});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->config.duplicate_stderr_filters, (std::vector<std::string>{"e1", "e2"}));
}

TEST(ArgsTorchrun2Test, DuplicateFiltersNeedALogDir) {
  auto p = ParseTorchrun2Args(
      {"--duplicate-stdout-filters", "a", "--log-dir", "/dev/null", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--log-dir /dev/null"), std::string::npos);
}

TEST(ArgsTorchrun2Test, ShutdownTimeoutFlagBeatsEnvironment) {
  ScopedEnv env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7");
  auto from_env = ParseTorchrun2Args({"--no-python", "true"});
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->config.shutdown_timeout_s, 7);
  auto flag = ParseTorchrun2Args({"--shutdown-timeout", "3", "--no-python", "true"});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->config.shutdown_timeout_s, 3);
  auto zero = ParseTorchrun2Args({"--shutdown_timeout=0", "--no-python", "true"});
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->config.shutdown_timeout_s, 0);
  {
    ScopedEnv pet("PET_SHUTDOWN_TIMEOUT", "4");
    auto p = ParseLaunchArgs({"--no-python", "true"});
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->config.shutdown_timeout_s, 4);
  }
  // A bad environment value does not matter when the flag is given, as in
  // torch, which reads the variable only without the flag.
  ScopedEnv bad("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon");
  EXPECT_TRUE(ParseTorchrun2Args({"--shutdown-timeout", "3", "--no-python", "true"}).ok());
  EXPECT_FALSE(ParseTorchrun2Args({"--no-python", "true"}).ok());
  // torch's LaunchConfig reads it with int(), and checks no sign there.
  {
    ScopedEnv fraction("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "2.5");
    EXPECT_FALSE(ParseTorchrun2Args({"--no-python", "true"}).ok());
  }
  ScopedEnv negative("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "-5");
  auto none = ParseTorchrun2Args({"--no-python", "true"});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->config.shutdown_timeout_s, 0);
}

TEST(ArgsTorchrun2Test, VirtualLocalRankMapsDevices) {
  {
    ScopedEnv unset("CUDA_VISIBLE_DEVICES", nullptr);
    auto p = ParseTorchrun2Args(
        {"--virtual-local-rank", "--nproc-per-node", "3", "--no-python", "true"});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_TRUE(p->config.virtual_local_rank);
    EXPECT_EQ(p->config.virtual_devices, (std::vector<std::string>{"0", "1", "2"}));
    auto off = ParseTorchrun2Args({"--nproc-per-node", "3", "--no-python", "true"});
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->config.virtual_local_rank);
    ScopedEnv pet("PET_VIRTUAL_LOCAL_RANK", "1");
    auto env = ParseLaunchArgs({"--no-python", "true"});
    ASSERT_TRUE(env.ok());
    EXPECT_TRUE(env->config.virtual_local_rank);
  }
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "4, 6,GPU-abc");
  auto p =
      ParseTorchrun2Args({"--virtual_local_rank", "--nproc-per-node", "3", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.virtual_devices, (std::vector<std::string>{"4", "6", "GPU-abc"}));
}

// torch's agent raises as it starts the workers; trun decides as torchrun
// does and refuses to start them (CheckBeforeStart).
TEST(ArgsTorchrun2Test, VirtualLocalRankNeedsADevicePerWorker) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,1");
  auto p =
      ParseTorchrun2Args({"--virtual-local-rank", "--nproc-per-node", "3", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Status s = CheckBeforeStart(p->config);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CUDA_VISIBLE_DEVICES=0,1 lists only 2"), std::string::npos)
      << s.message();
}

TEST(ArgsTorchrun2Test, PrintCompletionNeedsNoScript) {
  for (const char* shell : {"bash", "zsh", "tcsh"}) {
    auto p = ParseTorchrun2Args({"--print-completion", shell});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->action, LaunchAction::kPrintCompletion);
    EXPECT_EQ(p->completion_shell, shell);
  }
  auto u = ParseTorchrun2Args({"--nproc-per-node", "2", "--print_completion=zsh"});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->completion_shell, "zsh");
  auto bad = ParseTorchrun2Args({"--print-completion", "fish"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected bash, zsh or tcsh, got 'fish'"),
            std::string::npos);
  // No PET_ variable for an action: an exported one must not stop a launch.
  ScopedEnv pet("PET_PRINT_COMPLETION", "bash");
  auto run = ParseLaunchArgs({"--no-python", "true"});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->action, LaunchAction::kRun);
}

TEST(ArgsTorchrun2Test, BadValuesAreReportedTogether) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0");
  auto p = ParseTorchrun2Args({"--shutdown-timeout", "-1", "--nproc-per-node", "0", "--nnodes", "x",
                               "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("--shutdown-timeout: expected a whole number"), std::string::npos) << m;
  EXPECT_NE(m.find("--nproc-per-node"), std::string::npos) << m;
  EXPECT_NE(m.find("--nnodes"), std::string::npos) << m;
  auto frac = ParseTorchrun2Args({"--shutdown-timeout", "1.5", "--no-python", "true"});
  EXPECT_FALSE(frac.ok());
}

TEST(ArgsTorchrun2Test, LaunchFlagsListEverySpelling) {
  auto flags = LaunchFlags();
  auto find = [&](const std::string& name) -> const LaunchFlag* {
    for (const auto& f : flags) {
      if (f.name == name) return &f;
    }
    return nullptr;
  };
  for (const char* name :
       {"--log-line-prefix-template", "--log_line_prefix_template", "--duplicate-stdout-filters",
        "--duplicate_stderr_filters", "--shutdown-timeout", "--shutdown_timeout",
        "--print-completion", "--print_completion", "--nproc-per-node", "-r"}) {
    ASSERT_NE(find(name), nullptr) << name;
    EXPECT_TRUE(find(name)->takes_value) << name;
  }
  for (const char* name :
       {"--virtual-local-rank", "--virtual_local_rank", "--standalone", "-m", "--help"}) {
    ASSERT_NE(find(name), nullptr) << name;
    EXPECT_FALSE(find(name)->takes_value) << name;
  }
}

// argparse's allow_abbrev: any unambiguous prefix, in either spelling, with
// its value after a space or '='.
TEST(ArgsTorchrun2Test, UnambiguousPrefixesAreTheirOptions) {
  auto p = Parse({"--nnode", "2", "--max_restart", "2", "--nproc-per", "4", "--rdzv-b", "c10d",
                  "--rdzv_endp=h:1", "--no-python", "true", "--nnode", "7"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.min_nodes, 2);
  EXPECT_EQ(p->config.max_nodes, 2);
  EXPECT_EQ(p->config.max_restarts, 2);
  EXPECT_EQ(p->config.nproc_per_node, 4);
  EXPECT_EQ(p->config.rdzv_backend, "c10d");
  EXPECT_EQ(p->config.rdzv_endpoint, "h:1");
  // After the script everything is the script's.
  EXPECT_EQ(p->config.training_script_args, (std::vector<std::string>{"--nnode", "7"}));
}

TEST(ArgsTorchrun2Test, AmbiguousPrefixesNameEveryMatch) {
  auto n = Parse({"--n", "2", "--no-python", "true"});
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find(
                "ambiguous option: --n could match --nnodes, --nproc-per-node, --nproc_per_node, "
                "--no-python, --no_python, --node-rank, --node_rank, --numa-binding, "
                "--numa_binding"),
            std::string::npos)
      << n.status().message();
  // Each spelling counts, as in argparse: --nproc is a prefix of both.
  auto nproc = Parse({"--nproc=2", "--no-python", "true"});
  ASSERT_FALSE(nproc.ok());
  EXPECT_NE(nproc.status().message().find("--nproc could match --nproc-per-node, --nproc_per_node"),
            std::string::npos)
      << nproc.status().message();
}

// trun's own options never make a torchrun abbreviation ambiguous, and are
// abbreviated themselves where no torchrun option matches.
TEST(ArgsTorchrun2Test, TrunOnlyOptionsYieldToTorchrunsInPrefixes) {
  auto p = Parse({"--event-log", "console", "--event-log-f", "/dev/null", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.event_log_handler, "console");
  EXPECT_EQ(p->config.event_log_file, "/dev/null");
  auto health = Parse({"--health", "0", "--no-python", "true"});
  ASSERT_FALSE(health.ok());
  EXPECT_NE(health.status().message().find("ambiguous option: --health"), std::string::npos);
}

TEST(ArgsTorchrun2Test, AnOptionGivenTwiceKeepsTheLast) {
  auto p = Parse({"--nnodes", "2", "--nnodes", "1", "--max-restarts=1", "--max_restarts", "3",
                  "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.max_nodes, 1);
  EXPECT_EQ(p->config.max_restarts, 3);
}

// torchrun gives --node-rank to the static backend alone.
TEST(ArgsTorchrun2Test, NodeRankOffStaticIsIgnored) {
  auto c10d = Parse({"--rdzv-backend", "c10d", "--node-rank", "3", "--no-python", "true"});
  ASSERT_TRUE(c10d.ok()) << c10d.status().ToString();
  EXPECT_EQ(c10d->config.node_rank, 0);
  // One static node with no store address runs as --standalone (c10d).
  auto implied = Parse({"--node-rank", "1", "--no-python", "true"});
  ASSERT_TRUE(implied.ok()) << implied.status().ToString();
  EXPECT_EQ(implied->config.rdzv_backend, "c10d");
  auto elastic = Parse(
      {"--nnodes", "1:3", "--rdzv-backend", "c10d", "--node-rank", "5", "--no-python", "true"});
  EXPECT_TRUE(elastic.ok()) << elastic.status().ToString();
  // A static store on a given port: node rank 1 of 1 waits for a node 0, as
  // torchrun's does (with a warning).
  auto fixed = Parse({"--node-rank", "1", "--master-port", "29511", "--no-python", "true"});
  ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
  EXPECT_EQ(fixed->config.node_rank, 1);
}

// torchrun keeps --nnodes under --standalone (its lone node starts after the
// last call).
TEST(ArgsTorchrun2Test, StandaloneWithAnElasticRangeFromOneKeepsIt) {
  auto p = Parse({"--nnodes", "1:2", "--standalone", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.min_nodes, 1);
  EXPECT_EQ(p->config.max_nodes, 2);
  EXPECT_EQ(p->config.rdzv_backend, "c10d");
}

TEST(ArgsTorchrun2Test, LogsSpecsTakesTorchsDefaultEntryPoint) {
  EXPECT_TRUE(Parse({"--logs-specs", "default", "--no-python", "true"}).ok());
  EXPECT_TRUE(Parse({"--logs_specs=default", "--no-python", "true"}).ok());
  auto other = Parse({"--logs-specs", "mine", "--no-python", "true"});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("--logs-specs 'mine': trun supports only torch's entry "
                                          "point 'default'"),
            std::string::npos)
      << other.status().message();
}

// torchrun reads no PET_ variable for --logs-specs and --numa-binding.
TEST(ArgsTorchrun2Test, NoPetVariableForLogsSpecsOrNumaBinding) {
  ScopedEnv logs("PET_LOGS_SPECS", "mine");
  ScopedEnv numa("PET_NUMA_BINDING", "bogus");
  auto p = ParseLaunchArgs({"--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->config.logs_specs.has_value());
  EXPECT_FALSE(p->config.numa_binding.has_value());
}

TEST(ArgsTorchrun2Test, EveryEventHandlerTorchRegisters) {
  for (const char* name : {"null", "console", "dynamic_rendezvous"}) {
    EXPECT_TRUE(Parse({"--event-log-handler", name, "--no-python", "true"}).ok()) << name;
  }
  auto bad = Parse({"--event-log-handler", "kafka", "--no-python", "true"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("null, console or dynamic_rendezvous"), std::string::npos);
}

TEST(ArgsTorchrun2Test, NumaBindingModesAreTorchs) {
  auto bad = Parse({"--numa-binding", "cache", "--no-python", "true"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected node, socket, exclusive or core-complex"),
            std::string::npos);
}

// argparse's reading of a command line (issue 28's review): `--opt=` is the
// value '', `-t=3` is 3, a flag takes no value, and a value that looks like
// an option is no value.
TEST(ArgsTorchrun2Test, ValuesAreReadAsArgparseReadsThem) {
  auto empty = Parse({"--log-dir=", "--role=", "--no-python", "true", "a"});
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(empty->config.log_dir, std::nullopt);
  EXPECT_EQ(empty->config.role, "");
  EXPECT_EQ(empty->config.worker_argv, (std::vector<std::string>{"true", "a"}));
  auto short_eq = Parse({"-t=3", "-r=1", "--no-python", "true"});
  ASSERT_TRUE(short_eq.ok()) << short_eq.status().message();
  EXPECT_EQ(short_eq->config.tee.ForRank(0), Std::kAll);
  EXPECT_EQ(short_eq->config.redirects.ForRank(0), Std::kOut);
  for (const char* flag : {"--standalone=1", "--no-python=1", "--virtual-local-rank=0"}) {
    auto r = Parse({flag, "--no-python", "true"});
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_NE(r.status().message().find("ignored explicit argument"), std::string::npos)
        << r.status().message();
  }
  for (const char* opt : {"--role", "--rdzv-id", "-t"}) {
    auto r = Parse({opt, "-x", "--no-python", "true"});
    ASSERT_FALSE(r.ok()) << opt;
    EXPECT_NE(r.status().message().find("expected one argument"), std::string::npos)
        << r.status().message();
  }
  // A negative number is a value, as in argparse.
  EXPECT_TRUE(
      Parse({"--local-ranks-filter", "0", "--node-rank", "-0", "--no-python", "true"}).ok());
  // torch's regexes: nothing trimmed.
  for (auto spec : {std::vector<std::string>{"-r", " 3"}, {"-t", "0:3, 1:2"}}) {
    EXPECT_FALSE(Parse({spec[0], spec[1], "--no-python", "true"}).ok()) << spec[1];
  }
}

// torchrun's `env` action takes a set PET_ variable's text, '' included;
// `check_env` reads a flag's as a Python int. trun's own options read none.
TEST(ArgsTorchrun2Test, PetVariablesAreReadAsTorchrunReadsThem) {
  {
    ScopedEnv id("PET_RDZV_ID", "");
    auto r = ParseLaunchArgs(
        {"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--no-python", "true"});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->config.rdzv_id, "");
  }
  for (const char* name : {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_MASTER_PORT"}) {
    ScopedEnv e(name, "");
    EXPECT_FALSE(ParseLaunchArgs({"--no-python", "true"}).ok()) << name;
  }
  {
    ScopedEnv e("PET_STANDALONE", "true");
    auto r = ParseLaunchArgs({"--no-python", "true"});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("PET_STANDALONE='true'"), std::string::npos)
        << r.status().message();
  }
  {
    ScopedEnv e("PET_STANDALONE", "0");
    ScopedEnv m("PET_MASTER_PORT", "29511");
    auto r = ParseLaunchArgs({"--no-python", "true"});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FALSE(r->config.standalone);
  }
  {
    ScopedEnv e("PET_HEALTH_CHECK_PORT", "abc");
    auto r = ParseLaunchArgs({"--no-python", "true"});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FALSE(r->config.health_check_port.has_value());
  }
}

TEST(ArgsTorchrun2Test, ValuesTorchrunAccepts) {
  auto r = Parse({"--local-ranks-filter", "", "--max-restarts", "2147483647", "--nnodes", "1_0:2_0",
                  "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--signals-to-handle",
                  "SIGFOO,SIGUSR1", "--no-python", "true"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->config.local_ranks_filter.has_value());
  EXPECT_EQ(r->config.max_restarts, 2147483647);
  EXPECT_EQ(r->config.max_nodes, 20);
  EXPECT_EQ(r->config.signals_to_handle, (std::vector<int>{SIGUSR1}));
}

// torchrun takes any integer as a local rank to show: one no worker has
// shows nobody.
TEST(ArgsTorchrun2Test, ALocalRanksFilterOfNoWorkerShowsNobody) {
  // "-1,7" reads as an option to argparse, as to trun: attached, it is a value.
  for (std::vector<std::string> filter : {std::vector<std::string>{"--local-ranks-filter", "-1"},
                                          {"--local-ranks-filter", "99999999999"},
                                          {"--local-ranks-filter=-1,7"}}) {
    filter.insert(filter.end(), {"--no-python", "true"});
    auto r = Parse(filter);
    ASSERT_TRUE(r.ok()) << testing::PrintToString(filter) << ": " << r.status().message();
    ASSERT_TRUE(r->config.local_ranks_filter.has_value()) << testing::PrintToString(filter);
    EXPECT_EQ(r->config.local_ranks_filter->count(0), 0u) << testing::PrintToString(filter);
  }
  auto r = Parse({"--local-ranks-filter", "1,-1", "--no-python", "true"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r->config.local_ranks_filter, (std::set<int>{1}));
  EXPECT_FALSE(Parse({"--local-ranks-filter", "1,x", "--no-python", "true"}).ok());
}

// The cluster's environment fills only what the user left entirely unsaid
// (issue 28's review): explicit static flags are a static job, --nnodes 1 a
// standalone one, as under torchrun.
TEST(ArgsTorchrun2Test, ARendezvousChoiceOfTheUsersWinsOverTheCluster) {
  ScopedEnv ips("SKYPILOT_NODE_IPS", "10.0.0.5\n10.0.0.6\n");
  ScopedEnv rank("SKYPILOT_NODE_RANK", "1");
  ScopedEnv nodes("SKYPILOT_NUM_NODES", "2");
  ScopedEnv task("SKYPILOT_TASK_ID", "sky-1");
  auto plain = Parse({"--no-python", "true"});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->config.rdzv_backend, "c10d");
  EXPECT_EQ(plain->config.rdzv_id, "sky-1");
  auto static_job = Parse({"--nnodes=2", "--master_port=12375", "--master_addr=10.0.0.1",
                           "--node_rank=1", "--no-python", "true"});
  ASSERT_TRUE(static_job.ok()) << static_job.status().message();
  EXPECT_EQ(static_job->config.rdzv_backend, "static");
  EXPECT_EQ(static_job->config.rdzv_endpoint, "10.0.0.1:12375");
  EXPECT_EQ(static_job->config.node_rank, 1);
  auto one = Parse({"--nnodes", "1", "--no-python", "true"});
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_TRUE(one->config.standalone);
  EXPECT_EQ(one->config.max_nodes, 1);
}

}  // namespace
}  // namespace trun::launch
