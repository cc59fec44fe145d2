// The clusters' environments trun reads: SLURM's (slurm_env.h) and
// SkyPilot's (skypilot_env.h).
#include "launch/slurm_env.h"

#include <gtest/gtest.h>

#include "launch/skypilot_env.h"

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
  auto d = SlurmLaunchDefaults(From({}));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SlurmLaunchDefaults, TheBatchScriptAndSallocShellGetNone) {
  Env env = SecondNode();
  env.erase("SLURM_STEP_ID");
  auto d = SlurmLaunchDefaults(From(env));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SlurmLaunchDefaults, C10dOnTheFirstNodeWithThePortFromTheJobId) {
  auto d = SlurmLaunchDefaults(From(SecondNode()));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(*d, (std::map<std::string, std::string>{{"nnodes", "2"},
                                                    {"node_rank", "1"},
                                                    {"rdzv_backend", "c10d"},
                                                    {"rdzv_endpoint", "node1:16234"},
                                                    {"rdzv_id", "1234"}}));
}

TEST(SlurmLaunchDefaults, AOneNodeStepGetsNoneAsTorchrunsImpliedStandalone) {
  // torchrun runs one node as --standalone: a free port and a run id of its
  // own, so two steps that share the node never share a rendezvous.
  Env env = SecondNode();
  env["SLURM_STEP_NUM_NODES"] = env["SLURM_STEP_NUM_TASKS"] = "1";
  env["SLURM_NODEID"] = "0";
  env["SLURM_STEP_NODELIST"] = "node1";
  auto d = SlurmLaunchDefaults(From(env));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->empty());
}

TEST(SlurmLaunchDefaults, TheStepsNodesWinOverTheJobs) {
  Env env = SecondNode();
  env["SLURM_JOB_NODELIST"] = "gpu[07-12]";
  env["SLURM_NNODES"] = "6";
  env["SLURM_STEP_NODELIST"] = "gpu[09-10]";
  auto d = SlurmLaunchDefaults(From(env));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->at("rdzv_endpoint"), "gpu09:16234");
  EXPECT_EQ(d->at("nnodes"), "2");
}

TEST(SlurmLaunchDefaults, SeveralTasksPerNodeIsAnErrorNamingTheFix) {
  Env env = SecondNode();
  env["SLURM_STEP_NUM_TASKS"] = "8";
  auto d = SlurmLaunchDefaults(From(env));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--ntasks-per-node=1"), std::string::npos);
}

TEST(SlurmLaunchDefaults, ABrokenEnvironmentNamesWhatIsMissing) {
  Env env = SecondNode();
  env["SLURM_STEP_NODELIST"] = "node[1-";
  auto d = SlurmLaunchDefaults(From(env));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("node[1-"), std::string::npos);
  EXPECT_NE(d.status().message().find("--rdzv-endpoint"), std::string::npos);
}

// What SkyPilot exports on the second node of a 2-node cluster with 4 GPUs
// per node.
Env SkyPilotSecondNode() {
  return {{"SKYPILOT_NODE_IPS", "10.0.0.5\n10.0.0.6\n"},
          {"SKYPILOT_NODE_RANK", "1"},
          {"SKYPILOT_NUM_NODES", "2"},
          {"SKYPILOT_NUM_GPUS_PER_NODE", "4"},
          {"SKYPILOT_TASK_ID", "sky-2026-11-26-02-00-00-000001_mycluster_1"}};
}

TEST(SkyPilotLaunchDefaults, OutsideSkyPilotThereAreNone) {
  auto d = SkyPilotLaunchDefaults(From({}));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SkyPilotLaunchDefaults, AC10dJobOnTheHeadNode) {
  auto d = SkyPilotLaunchDefaults(From(SkyPilotSecondNode()));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->at("nnodes"), "2");
  EXPECT_EQ(d->at("node_rank"), "1");
  EXPECT_EQ(d->at("nproc_per_node"), "4");
  EXPECT_EQ(d->at("rdzv_backend"), "c10d");
  EXPECT_EQ(d->at("rdzv_id"), "sky-2026-11-26-02-00-00-000001_mycluster_1");
  const std::string& ep = d->at("rdzv_endpoint");
  ASSERT_TRUE(ep.starts_with("10.0.0.5:")) << ep;
  const int port = std::stoi(ep.substr(9));
  EXPECT_GE(port, 20000);
  EXPECT_LT(port, 30000);
  // Every node of the task computes the same endpoint; another task another.
  Env head = SkyPilotSecondNode();
  head["SKYPILOT_NODE_RANK"] = "0";
  EXPECT_EQ(SkyPilotLaunchDefaults(From(head))->at("rdzv_endpoint"), ep);
  Env other = SkyPilotSecondNode();
  other["SKYPILOT_TASK_ID"] = "sky-2026-11-26-02-00-00-000002_mycluster_2";
  EXPECT_NE(SkyPilotLaunchDefaults(From(other))->at("rdzv_endpoint"), ep);
}

TEST(SkyPilotLaunchDefaults, CpuClustersKeepTheWorkerCount) {
  Env env = SkyPilotSecondNode();
  env["SKYPILOT_NUM_GPUS_PER_NODE"] = "0";
  env.erase("SKYPILOT_NUM_NODES");
  auto d = SkyPilotLaunchDefaults(From(env));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->count("nproc_per_node"), 0u);
  EXPECT_EQ(d->at("nnodes"), "2");  // the lines of SKYPILOT_NODE_IPS
}

TEST(SkyPilotLaunchDefaults, AOneNodeTaskGetsOnlyItsWorkerCount) {
  // As torchrun's implied standalone: two trun in one task never meet.
  Env env = SkyPilotSecondNode();
  env["SKYPILOT_NODE_IPS"] = "10.0.0.5\n";
  env["SKYPILOT_NUM_NODES"] = "1";
  env["SKYPILOT_NODE_RANK"] = "0";
  auto d = SkyPilotLaunchDefaults(From(env));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(*d, (std::map<std::string, std::string>{{"nproc_per_node", "4"}}));
}

TEST(SkyPilotLaunchDefaults, ARankBeyondTheNodesIsAnError) {
  Env env = SkyPilotSecondNode();
  env["SKYPILOT_NODE_RANK"] = "2";
  auto d = SkyPilotLaunchDefaults(From(env));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("SKYPILOT_NODE_RANK='2'"), std::string::npos);
}

}  // namespace
}  // namespace trun::launch
