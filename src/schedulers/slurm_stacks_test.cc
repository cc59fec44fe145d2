#include "schedulers/slurm_stacks.h"

#include <gtest/gtest.h>

#include <string>

namespace trun::schedulers::slurm {
namespace {

std::map<std::string, std::string> Step(const std::string& job, const std::string& step,
                                        const std::string& node) {
  return {{"SLURM_JOB_ID", job}, {"SLURM_STEP_ID", step}, {"SLURMD_NODENAME", node}};
}

// Two nodes of one host, as tools/slurm-cluster runs them: job 7's step 0
// (an agent and its workers) on node1 and node2, its batch script, another
// job's task, and the reader's own step 1.
std::vector<NodeProcess> Host() {
  auto batch = Step("7", "", "node1");
  batch.erase("SLURM_STEP_ID");
  auto worker = Step("7", "0", "node1");
  worker["RANK"] = "1";
  return {
      {100, 1, {}},                         // slurmd's slurmstepd
      {101, 100, Step("7", "0", "node1")},  // the agent on node1
      {102, 101, worker},                   // its worker
      {103, 100, batch},                    // the batch script
      {104, 103, batch},                    // srun's client under it
      {201, 200, Step("7", "0", "node2")},  // the agent on node2
      {301, 300, Step("8", "0", "node1")},  // another job's task
      {401, 400, Step("7", "1", "node1")},  // the reader itself
  };
}

TEST(SlurmStacks, TheRootsAreTheOtherStepsTasksOnThisNode) {
  EXPECT_EQ(StepTaskRoots(Host(), "7", "node1", "1"), (std::vector<pid_t>{101}));
  EXPECT_EQ(StepTaskRoots(Host(), "7", "node2", "1"), (std::vector<pid_t>{201}));
  // Another step of the reader's: its own tasks are the app's.
  EXPECT_EQ(StepTaskRoots(Host(), "7", "node1", "5"), (std::vector<pid_t>{101, 401}));
  EXPECT_TRUE(StepTaskRoots(Host(), "9", "node1", "1").empty());
}

TEST(SlurmStacks, OneStepOverTheNodesOrTheComponents) {
  EXPECT_EQ(StackStepCommand("/opt/trun", "12", 3, 1),
            (std::vector<std::string>{"srun", "--jobid=12", "--nodes=3", "--ntasks-per-node=1",
                                      "--overlap", "--quiet", "--input=none", "--label",
                                      "--job-name=trun-stack", "/opt/trun", "slurm-stack", "12"}));
  auto het = StackStepCommand("/opt/trun", "12", 3, 3);
  EXPECT_EQ(het[2], "--het-group=0-2");
}

TEST(SlurmStacks, GathersEachTasksPiecesIntoOneDocumentPerNode) {
  const std::string node1 = R"({"hostname":"node1","workers":[{"rank":0}]})";
  const std::string node2 = R"({"hostname":"node2","workers":[{"rank":1}]})";
  // srun cuts a long line into pieces and interleaves the tasks'; --label
  // pads task ids to one width.
  std::string out = " 1: " + node2.substr(0, 10) + "\n 0: " + node1.substr(0, 7) +
                    "\n 1: " + node2.substr(10) + "\n 0: " + node1.substr(7) + "\n";
  auto g = GatherStacks(out, {"node1", "node2", "node3", "node1"});
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0]["hostname"], "node1");
  EXPECT_EQ(g.nodes[1]["workers"][0]["rank"], 1);
  EXPECT_EQ(g.missing, (std::vector<std::string>{"node3"}));
}

TEST(SlurmStacks, TwoTasksOfOneNodeGiveOneDocumentAndGarbageNone) {
  const std::string doc = R"({"hostname":"node1","workers":[]})";
  auto g = GatherStacks("0: " + doc + "\n1: " + doc + "\n2: not json\nsrun: a note\n",
                        {"node1", "node2"});
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.missing, (std::vector<std::string>{"node2"}));
  EXPECT_EQ(GatherStacks("", {"node1"}).missing, (std::vector<std::string>{"node1"}));
}

}  // namespace
}  // namespace trun::schedulers::slurm
