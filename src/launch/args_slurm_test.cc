// ParseLaunchArgs under srun: SLURM's environment fills what the user left
// entirely unsaid (slurm_env.h); a rendezvous choice of the user's wins.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

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

TEST_F(ArgsUnderSrun, AGivenRunIdWins) {
  auto p = ParseLaunchArgs({"--rdzv-id", "mine", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.rdzv_id, "mine");
  EXPECT_EQ(p->config.rdzv_endpoint, "node3:15077");
  EXPECT_EQ(p->config.max_nodes, 2);
}

// Any rendezvous choice of the user's means the user drives, as under
// torchrun: SLURM fills nothing.
TEST_F(ArgsUnderSrun, ARendezvousChoiceMeansTheUserDrives) {
  auto endpoint = ParseLaunchArgs(
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400", "--no-python", "true"});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().message();
  EXPECT_EQ(endpoint->config.rdzv_endpoint, "head:29400");
  EXPECT_EQ(endpoint->config.max_nodes, 1);
  EXPECT_EQ(endpoint->config.rdzv_id, "none");
  auto fixed = ParseLaunchArgs({"--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port",
                                "12375", "--node-rank", "1", "--no-python", "true"});
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->config.rdzv_backend, "static");
  EXPECT_EQ(fixed->config.rdzv_endpoint, "10.0.0.1:12375");
  EXPECT_EQ(fixed->config.node_rank, 1);
  // --nnodes 1: one standalone job on each node.
  for (const char* backend : {"", "static"}) {
    std::vector<std::string> args = {"--nnodes", "1", "--no-python", "true"};
    if (*backend) args.insert(args.begin(), {"--rdzv-backend", backend});
    auto one = ParseLaunchArgs(args);
    ASSERT_TRUE(one.ok()) << one.status().message();
    EXPECT_TRUE(one->config.standalone) << backend;
    EXPECT_EQ(one->config.node_rank, 0) << backend;
  }
}

TEST_F(ArgsUnderSrun, StandaloneIgnoresSlurm) {
  auto p = ParseLaunchArgs({"--standalone", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.max_nodes, 1);
}

}  // namespace
}  // namespace trun::launch
