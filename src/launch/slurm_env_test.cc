#include "launch/slurm_env.h"

#include <gtest/gtest.h>

namespace trun::launch {
namespace {

using Env = std::map<std::string, std::string>;

GetEnv From(const Env& env) {
  return [env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
}

// What `srun --nodes=2 --ntasks-per-node=1` gives the task on the second
// node (captured on the cluster tools/slurm-cluster starts).
Env SecondNode() {
  return {{"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_NNODES", "2"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_NODEID", "1"},
          {"SLURM_PROCID", "1"},
          {"SLURM_JOB_NODELIST", "node[1-2]"},
          {"SLURM_STEP_NODELIST", "node[1-2]"}};
}

TEST(SlurmLaunchDefaults, OutsideSlurmThereAreNone) {
  auto d = SlurmLaunchDefaults(From({}), "", false);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SlurmLaunchDefaults, TheBatchScriptAndSallocShellGetNone) {
  Env env = SecondNode();
  env.erase("SLURM_STEP_ID");
  auto d = SlurmLaunchDefaults(From(env), "", false);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SlurmLaunchDefaults, C10dOnTheFirstNodeWithThePortFromTheJobId) {
  auto d = SlurmLaunchDefaults(From(SecondNode()), "", false);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(*d, (std::map<std::string, std::string>{{"nnodes", "2"},
                                                    {"node_rank", "1"},
                                                    {"rdzv_backend", "c10d"},
                                                    {"rdzv_endpoint", "node1:16234"},
                                                    {"rdzv_id", "1234"}}));
}

TEST(SlurmLaunchDefaults, StaticGetsTheMasterAddressAndPort) {
  auto d = SlurmLaunchDefaults(From(SecondNode()), "static", false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->at("master_addr"), "node1");
  EXPECT_EQ(d->at("master_port"), "16234");
  EXPECT_EQ(d->count("rdzv_backend"), 0u);
  EXPECT_EQ(d->count("rdzv_endpoint"), 0u);
}

TEST(SlurmLaunchDefaults, TheStepsNodesWinOverTheJobs) {
  Env env = SecondNode();
  env["SLURM_JOB_NODELIST"] = "gpu[07-12]";
  env["SLURM_NNODES"] = "6";
  env["SLURM_STEP_NODELIST"] = "gpu[09-10]";
  auto d = SlurmLaunchDefaults(From(env), "", false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->at("rdzv_endpoint"), "gpu09:16234");
  EXPECT_EQ(d->at("nnodes"), "2");
}

TEST(SlurmLaunchDefaults, SeveralTasksPerNodeIsAnErrorNamingTheFix) {
  Env env = SecondNode();
  env["SLURM_STEP_NUM_TASKS"] = "8";
  auto d = SlurmLaunchDefaults(From(env), "", false);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--ntasks-per-node=1"), std::string::npos);
  // ... unless the user says how many nodes there are.
  EXPECT_TRUE(SlurmLaunchDefaults(From(env), "", true).ok());
}

TEST(SlurmLaunchDefaults, ABrokenEnvironmentNamesWhatIsMissing) {
  Env env = SecondNode();
  env["SLURM_STEP_NODELIST"] = "node[1-";
  auto d = SlurmLaunchDefaults(From(env), "", false);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("node[1-"), std::string::npos);
  EXPECT_NE(d.status().message().find("--rdzv-endpoint"), std::string::npos);
}

}  // namespace
}  // namespace trun::launch
