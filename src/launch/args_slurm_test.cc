// ParseLaunchArgs under srun: SLURM's environment fills what the flags
// leave out (slurm_env.h), and flags win.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "launch/args.h"

namespace trun::launch {
namespace {

class ArgsUnderSrun : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [k, v] : kEnv) setenv(k, v, 1);
    for (const char* v : {"PET_NNODES", "PET_NODE_RANK", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT",
                          "PET_RDZV_ID", "PET_STANDALONE", "PET_MASTER_ADDR", "PET_MASTER_PORT"}) {
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : kEnv) unsetenv(k);
  }
  static constexpr std::pair<const char*, const char*> kEnv[] = {
      {"SLURM_JOB_ID", "77"},
      {"SLURM_STEP_ID", "0"},
      {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_NUM_TASKS", "2"},
      {"SLURM_NODEID", "1"},
      {"SLURM_STEP_NODELIST", "node[3-4]"},
      {"SLURM_JOB_NODELIST", "node[3-4]"}};
};

TEST_F(ArgsUnderSrun, NoFlagsNeeded) {
  auto p = ParseLaunchArgs({"--nproc-per-node", "2", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  const auto& c = p->config;
  EXPECT_EQ(c.min_nodes, 2);
  EXPECT_EQ(c.max_nodes, 2);
  // c10d orders the nodes itself and reads no node rank, as in torch;
  // SLURM_NODEID is static's (below).
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.rdzv_backend, "c10d");
  EXPECT_EQ(c.rdzv_endpoint, "node3:15077");
  EXPECT_EQ(c.rdzv_id, "77");
}

TEST_F(ArgsUnderSrun, FlagsWin) {
  auto p = ParseLaunchArgs(
      {"--rdzv-endpoint", "head:29400", "--rdzv-id", "mine", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.rdzv_endpoint, "head:29400");
  EXPECT_EQ(p->config.rdzv_id, "mine");
  EXPECT_EQ(p->config.max_nodes, 2);
}

TEST_F(ArgsUnderSrun, StaticFindsNodeZeroOnTheFirstHost) {
  auto p = ParseLaunchArgs({"--rdzv-backend", "static", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.master_addr, "node3");
  EXPECT_EQ(p->config.master_port, 15077);
  EXPECT_EQ(p->config.node_rank, 1);
  EXPECT_EQ(p->config.rdzv.endpoint_host, "node3");
  EXPECT_EQ(p->config.rdzv.endpoint_port, 15077);
}

TEST_F(ArgsUnderSrun, StandaloneIgnoresSlurm) {
  auto p = ParseLaunchArgs({"--standalone", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.max_nodes, 1);
}

}  // namespace
}  // namespace trun::launch
