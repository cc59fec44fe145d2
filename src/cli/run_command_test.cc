#include "cli/run_command.h"

#include <gtest/gtest.h>

namespace trun::cli {
namespace {

TEST(RunArgsFromJsonTest, TorchXsRunArgumentsBecomeTrunRunsArguments) {
  auto a = RunArgsFromJson(R"({
    "component_name": "utils.sh", "scheduler": "local",
    "scheduler_args": {"log_dir": "/tmp/a,b", "prepend_cwd": true, "unset": null},
    "component_args": {"num_replicas": 2, "env": {"A": "1", "B": "x"}},
    "component_args_str": ["echo", "hi"], "dryrun": true, "wait": false, "workspace": ""})");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a,
            (Args{"--scheduler", "local", "-cfg", "log_dir='/tmp/a,b',prepend_cwd=true", "--dryrun",
                  "utils.sh", "--num_replicas", "2", "--env", "A=1,B=x", "echo", "hi"}));
}

TEST(RunArgsFromJsonTest, EveryProblemAtOnce) {
  auto a = RunArgsFromJson(R"({"scheduler": 3, "dryrun": "yes", "extra": 1, "workspace": "."})");
  ASSERT_FALSE(a.ok());
  const std::string& m = a.status().message();
  for (const char* needle :
       {"component_name: missing", "scheduler_args: missing", "scheduler: expected a string",
        "dryrun: expected true or false", "extra: not a field", "workspace: trun has no"}) {
    EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
  }
  EXPECT_NE(RunArgsFromJson("[1]").status().message().find("expected one JSON object"),
            std::string::npos);
  EXPECT_NE(RunArgsFromJson("{").status().message().find("stdin is not JSON"), std::string::npos);
}

}  // namespace
}  // namespace trun::cli
