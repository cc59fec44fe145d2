// The flags torchrun 2.x added: --log-line-prefix-template,
// --duplicate-std{out,err}-filters, --shutdown-timeout, --virtual-local-rank,
// --print-completion.
#include <gtest/gtest.h>
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
        "PET_PRINT_COMPLETION", "OMP_NUM_THREADS"}) {
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

TEST(ArgsTorchrun2Test, VirtualLocalRankNeedsADevicePerWorker) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,1");
  auto p =
      ParseTorchrun2Args({"--virtual-local-rank", "--nproc-per-node", "3", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("CUDA_VISIBLE_DEVICES=0,1 lists only 2"), std::string::npos)
      << p.status().message();
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
  auto p = ParseTorchrun2Args({"--shutdown-timeout", "-1", "--virtual-local-rank",
                               "--nproc-per-node", "2", "--nnodes", "x", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("--shutdown-timeout: expected a whole number"), std::string::npos) << m;
  EXPECT_NE(m.find("--virtual-local-rank"), std::string::npos) << m;
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

}  // namespace
}  // namespace trun::launch
