#include "agent/worker_env.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>

namespace trun::agent {
namespace {

std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    size_t eq = kv.find('=');
    EXPECT_FALSE(m.count(kv.substr(0, eq))) << "twice: " << kv;
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

WorkerPlace Place() {
  WorkerPlace p;
  p.local_rank = 1;
  p.rank = 5;
  p.group_rank = 1;
  p.nodes = 2;
  p.world_size = 8;
  p.master_addr = "node0";
  p.master_port = 29400;
  p.restart_count = 2;
  p.error_file = "/logs/attempt_2/1/error.json";
  return p;
}

launch::LaunchConfig Config() {
  launch::LaunchConfig c;
  c.nproc_per_node = 4;
  c.max_restarts = 3;
  c.rdzv_id = "job7";
  c.role = "trainer";
  c.signals_to_handle = {SIGTERM, SIGINT};
  return c;
}

TEST(WorkerEnv, TorchrunsContract) {
  std::vector<std::string> agent = {"PATH=/usr/bin", "HOME=/root"};
  auto env = AsMap(WorkerEnv(agent, Config(), "", Place()));
  EXPECT_EQ(env["PATH"], "/usr/bin");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["ROLE_RANK"], "5");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["ROLE_NAME"], "trainer");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["MASTER_ADDR"], "node0");
  EXPECT_EQ(env["MASTER_PORT"], "29400");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/logs/attempt_2/1/error.json");
  EXPECT_EQ(env["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT");
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_FALSE(env.count("OMP_NUM_THREADS"));
  EXPECT_FALSE(env.count("TORCHELASTIC_TIMER_FILE"));
}

TEST(WorkerEnv, TheAgentsOwnValuesOfTheContractNeverLeakThrough) {
  std::vector<std::string> agent = {
      "RANK=99",       "MASTER_PORT=1", "TORCHELASTIC_ERROR_FILE=/agent",
      "WORLD_SIZE=77", "X=1",           "TRUN_JOB_TOKEN=secret"};
  auto env = AsMap(WorkerEnv(agent, Config(), "", Place()));
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["MASTER_PORT"], "29400");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/logs/attempt_2/1/error.json");
  EXPECT_EQ(env["X"], "1");
  EXPECT_FALSE(env.count("TRUN_JOB_TOKEN"));
}

TEST(WorkerEnv, KeepsTheAgentsNcclErrorHandling) {
  std::vector<std::string> agent = {"NCCL_ASYNC_ERROR_HANDLING=0",
                                    "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"};
  auto env = AsMap(WorkerEnv(agent, Config(), "", Place()));
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "0");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
}

TEST(WorkerEnv, OmpAndWatchdog) {
  auto c = Config();
  c.set_omp_num_threads = true;
  std::vector<std::string> agent = {"TORCHELASTIC_TIMER_FILE=/stale"};
  auto env = AsMap(WorkerEnv(agent, c, "/tmp/w/timer", Place()));
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(env["TORCHELASTIC_TIMER_FILE"], "/tmp/w/timer");
  // Without the watchdog the agent's own value passes, as torchrun does.
  env = AsMap(WorkerEnv(agent, Config(), "", Place()));
  EXPECT_EQ(env["TORCHELASTIC_TIMER_FILE"], "/stale");
}

TEST(WorkerEnv, VirtualLocalRank) {
  auto c = Config();
  c.virtual_local_rank = true;
  c.virtual_devices = {"4", "5", "6", "7"};
  std::vector<std::string> agent = {"CUDA_VISIBLE_DEVICES=4,5,6,7"};
  auto env = AsMap(WorkerEnv(agent, c, "", Place()));
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "5");
  // Without it, the agent's devices pass through unchanged.
  env = AsMap(WorkerEnv(agent, Config(), "", Place()));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "4,5,6,7");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
}

}  // namespace
}  // namespace trun::agent
