#include "agent/hang.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "agent/telemetry.h"
#include "proc/ready_child_for_tests.h"

namespace trun::agent {
namespace {

// One sample of two workers.
ProgressSample At(double t, double cpu0, double cpu1, uint64_t bytes0 = 0, uint64_t bytes1 = 0) {
  return {t, {cpu0, cpu1}, {bytes0, bytes1}, {}};
}

// A node's window, and whether its workers have been quiet for the whole
// timeout: what makes it ask the job.
struct Window {
  double timeout_s;
  ProgressWindow w{timeout_s};
  bool Stalled(ProgressSample s) { return w.Quiet(std::move(s)) >= timeout_s; }
};

TEST(HangProgress, IdleWorkersAreStalledOnceTheWholeTimeoutIsSeen) {
  Window w{5};
  for (int t = 0; t < 5; ++t) EXPECT_FALSE(w.Stalled(At(t, 1.0, 2.0))) << t;
  EXPECT_TRUE(w.Stalled(At(5, 1.0, 2.0)));
  EXPECT_TRUE(w.Stalled(At(6, 1.0, 2.0)));
}

TEST(HangProgress, UnderOnePercentOfACoreIsIdleAndMoreIsProgress) {
  Window waiting{5};
  // A waiter's background threads: 0.04 s over 5 s, under 1% of a core.
  for (int t = 0; t <= 4; ++t) waiting.Stalled(At(t, 0.01 * t, 0));
  EXPECT_TRUE(waiting.Stalled(At(5, 0.04, 0)));

  Window computing{5};
  // One worker computes (a whole core), the other waits for it.
  for (int t = 0; t <= 10; ++t) EXPECT_FALSE(computing.Stalled(At(t, t, 0))) << t;
}

TEST(HangProgress, OutputIsProgressAndTheWindowMovesOn) {
  Window w{3};
  EXPECT_FALSE(w.Stalled(At(0, 0, 0)));
  EXPECT_FALSE(w.Stalled(At(1, 0, 0, 10)));
  EXPECT_FALSE(w.Stalled(At(2, 0, 0, 10)));
  EXPECT_FALSE(w.Stalled(At(3, 0, 0, 10)));  // the line at 1 s is in the window
  EXPECT_TRUE(w.Stalled(At(4, 0, 0, 10)));   // 1 s to 4 s: nothing
  EXPECT_FALSE(w.Stalled(At(5, 0, 0, 10, 1)));
  EXPECT_FALSE(w.Stalled(At(7.5, 0, 0, 10, 1)));
  EXPECT_TRUE(w.Stalled(At(8.5, 0, 0, 10, 1)));
}

TEST(HangSecondTimeout, ANodeThatNamedNobodyFailsOneTimeoutLater) {
  SecondTimeout t(5);
  EXPECT_FALSE(t.Due(true, 10));  // the report's sample
  EXPECT_FALSE(t.Due(true, 14));
  EXPECT_TRUE(t.Due(true, 15));
}

// The agent used to forget the second timeout once progress had put it off:
// a node whose ranks all wait then never failed on its own.
TEST(HangSecondTimeout, ProgressPutsItOffAndTheNextStallStartsItAgain) {
  SecondTimeout t(5);
  EXPECT_FALSE(t.Due(true, 10));
  EXPECT_FALSE(t.Due(false, 12));  // a worker wrote a line
  EXPECT_FALSE(t.Due(true, 15));   // stalled again: one more timeout from here
  EXPECT_FALSE(t.Due(true, 19));
  EXPECT_TRUE(t.Due(true, 20));
}

TEST(HangRanks, RangesAreCollapsed) {
  EXPECT_EQ(FormatRanks({3}), "rank 3");
  EXPECT_EQ(FormatRanks({2, 0, 1}), "ranks 0-2");
  EXPECT_EQ(FormatRanks({0, 1, 2, 4, 5, 6, 7}), "ranks 0-2, 4-7");
  EXPECT_EQ(FormatRanks({1, 3, 4, 9}), "ranks 1, 3-4, 9");
}

const proc::PyFrame kAllReduce{"all_reduce",
                               "/usr/lib/python3/dist-packages/torch/distributed/"
                               "distributed_c10d.py",
                               1536};
const proc::PyFrame kMainCall{"main", "/job/train.py", 41};
const proc::PyFrame kSleep{"slow_step", "/job/train.py", 12};

RankStack Waiting(int rank) { return {rank, {kAllReduce, kMainCall}, ""}; }
RankStack Sleeping(int rank) { return {rank, {kSleep, {"main", "/job/train.py", 40}}, ""}; }

TEST(HangGroups, TheRankOutsideTheCollectiveIsNamedWithItsOwnLine) {
  std::vector<RankStack> stacks = {Waiting(0), Waiting(1), Waiting(2), Sleeping(3),
                                   Waiting(4), Waiting(5), Waiting(6), Waiting(7)};
  auto groups = GroupStacks(stacks);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_TRUE(groups[0].odd);
  EXPECT_EQ(groups[0].ranks, std::vector<int>{3});
  EXPECT_FALSE(groups[1].odd);
  EXPECT_EQ(HangSummary(groups),
            "rank 3 is not where the others are: in slow_step at train.py:12; ranks 0-2, 4-7: in "
            "all_reduce at distributed_c10d.py:1536, called from main at train.py:41");
}

TEST(HangGroups, OneToOneOnANodeStillNamesTheRankOutsideTheCollective) {
  auto groups = GroupStacks({Waiting(2), Sleeping(3)});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(HangLine(groups[0]), "rank 3 is not where the others are: in slow_step at train.py:12");
  EXPECT_EQ(HangLine(groups[1]),
            "rank 2: in all_reduce at distributed_c10d.py:1536, called from main at train.py:41");
}

TEST(HangGroups, AllWaitingNamesNobody) {
  auto groups = GroupStacks({Waiting(0), Waiting(1)});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_FALSE(groups[0].odd);
  EXPECT_EQ(FormatRanks(groups[0].ranks), "ranks 0-1");
}

TEST(HangGroups, WithoutACollectiveTheMinorityIsOddAndATieNamesNobody) {
  RankStack elsewhere{2, {{"load", "/job/data.py", 7}}, ""};
  auto groups = GroupStacks({Sleeping(0), Sleeping(1), elsewhere});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_TRUE(groups[0].odd);
  EXPECT_EQ(groups[0].ranks, std::vector<int>{2});
  EXPECT_FALSE(groups[1].odd);

  auto tie = GroupStacks({Sleeping(0), elsewhere});
  ASSERT_EQ(tie.size(), 2u);
  EXPECT_FALSE(tie[0].odd || tie[1].odd);
}

TEST(HangGroups, AnUnreadableStackIsAGroupOfItsOwn) {
  RankStack gone{1, {}, "no such process"};
  auto groups = GroupStacks({Waiting(0), gone});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(HangLine(groups[0]), "rank 1 is not where the others are: no stack: no such process");
}

RankStack Finished(int rank) { return {rank, {}, "", true}; }

// A job whose group rank 0 finished while another node's ranks hang: the
// finished ranks wait on nobody, so they are never the odd ones, and they
// do not make a majority that names the running ranks.
TEST(HangGroups, FinishedRanksAreGroupedButNeverNamed) {
  auto groups = GroupStacks({Finished(0), Finished(1), Waiting(2), Sleeping(3)});
  EXPECT_EQ(HangSummary(groups),
            "rank 3 is not where the others are: in slow_step at train.py:12; ranks 0-1: "
            "finished: exited 0; rank 2: in all_reduce at distributed_c10d.py:1536, called from "
            "main at train.py:41");
  EXPECT_FALSE(GroupStacks({Finished(0), Waiting(1), Waiting(2)})[0].odd);
  RankStack elsewhere{4, {{"load", "/job/data.py", 7}}, ""};
  auto tie = GroupStacks({Finished(0), Finished(1), Finished(2), Sleeping(3), elsewhere});
  ASSERT_EQ(tie.size(), 3u);
  EXPECT_FALSE(tie[0].odd || tie[1].odd || tie[2].odd);
}

TEST(HangGroups, StacksOfADocumentAreTheMainThreads) {
  auto doc = nlohmann::ordered_json::parse(R"({"workers": [
    {"rank": 4, "error": null, "threads": [
      {"frames": [{"function": "f", "file": "/a.py", "line": 3}]},
      {"frames": [{"function": "g", "file": "/b.py", "line": 9}]}]},
    {"rank": 5, "error": "not a Python", "threads": []},
    {"rank": 6, "status": "succeeded", "error": null, "threads": []},
    {"rank": 7, "status": "stopped", "error": null, "threads": []}]})");
  auto stacks = RankStacksOf(doc);
  ASSERT_EQ(stacks.size(), 4u);
  EXPECT_EQ(Where(stacks[0]), "in f at a.py:3");
  EXPECT_EQ(Where(stacks[1]), "no stack: not a Python");
  EXPECT_TRUE(stacks[2].finished);
  EXPECT_EQ(Where(stacks[2]), "finished: exited 0");
  EXPECT_FALSE(stacks[3].finished);
  EXPECT_EQ(Where(stacks[3]), "no stack: not running");
}

TEST(HangProgress, QuietCountsFromTheLastProgress) {
  ProgressWindow w(5);
  EXPECT_EQ(w.Quiet(At(0, 0, 0)), 0);
  EXPECT_EQ(w.Quiet(At(1, 1, 0)), 0);  // rank 0 computed
  EXPECT_EQ(w.Quiet(At(2, 1, 0)), 1);
  EXPECT_EQ(w.Quiet(At(4, 1, 0)), 3);
  EXPECT_EQ(w.Quiet(At(5, 1, 0, 0, 7)), 0);  // rank 1 wrote
}

TEST(HangProgress, AWorkerSpinningAtOneDeviceWaitIsQuiet) {
  // Rank 0 spins a whole core in torch.cuda.synchronize (CUDA polls while
  // it waits for a long kernel); rank 1 sleeps.
  const std::vector<proc::PyFrame> sync = {{"synchronize", "/x/torch/cuda/__init__.py", 1040},
                                           {"main", "/job/train.py", 12}};
  const std::string wait = DeviceWait(sync);
  ASSERT_FALSE(wait.empty());
  auto spin = [&](double t, const std::string& w0) {
    ProgressSample s = At(t, t, 0);
    s.device_wait = {w0, ""};
    return s;
  };
  Window w{5};
  for (int t = 0; t < 5; ++t) EXPECT_FALSE(w.Stalled(spin(t, wait))) << t;
  EXPECT_TRUE(w.Stalled(spin(5, wait)));
  // It moved on: the next wait is another place, and that is progress.
  const std::string barrier =
      DeviceWait({{"barrier", "/x/torch/distributed/distributed_c10d.py", 4000},
                  {"main", "/job/train.py", 13}});
  EXPECT_NE(barrier, wait);
  EXPECT_EQ(w.w.Quiet(spin(6, barrier)), 0);
  // One sample whose stack was not read (or was not a wait) breaks the
  // window, as CPU always did.
  Window gap{5};
  for (int t = 0; t < 3; ++t) gap.Stalled(spin(t, wait));
  gap.Stalled(spin(3, ""));
  for (int t = 4; t <= 8; ++t) EXPECT_FALSE(gap.Stalled(spin(t, wait))) << t;
  EXPECT_TRUE(gap.Stalled(spin(9, wait)));
}

TEST(HangProgress, OnlyTorchsWaitsCountAsDeviceWaits) {
  // A loop of the user's own computes, whatever it calls below.
  EXPECT_EQ(DeviceWait({{"step", "/job/train.py", 7}, {"main", "/job/train.py", 20}}), "");
  EXPECT_EQ(DeviceWait({}), "");
  EXPECT_NE(DeviceWait({{"wait", "/x/torch/distributed/c10d_logger.py", 81}}), "");
}

// A Python whose main thread runs `body` with a fake torch/cuda/ module
// on its path (so that its frames are "torch.cuda" frames), whose
// synchronize(seconds) waits at one line inside a C call, as torch's does;
// it prints "ready" first.
class FakeTorchWaiter {
 public:
  explicit FakeTorchWaiter(const std::string& body) {
    char tmpl[] = "/tmp/trun-wait-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::filesystem::create_directories(dir_ / "torch" / "cuda");
    std::ofstream(dir_ / "torch" / "__init__.py");
    std::ofstream(dir_ / "torch" / "cuda" / "__init__.py") << "import time\n"
                                                              "def synchronize(seconds):\n"
                                                              "    time.sleep(seconds)\n";
    const std::string script =
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport torch.cuda\n"
        "print('ready', flush=True)\n" +
        body;
    child_.emplace(std::vector<std::string>{"/usr/bin/python3", "-c", script, dir_.string()});
    // It printed before it went on: give it time to get there.
    usleep(300 * 1000);
  }
  ~FakeTorchWaiter() {
    child_.reset();
    std::filesystem::remove_all(dir_);
  }
  pid_t pid() const { return child_->pid(); }

 private:
  std::filesystem::path dir_;
  std::optional<proc::ReadyChild> child_;
};

// Watches `pid` for `samples` spans of half a second; how many found it at
// one device wait all along, and the last such wait.
std::pair<int, std::string> WatchSpans(DeviceWaitWatcher& watcher, pid_t pid, int samples) {
  watcher.Watch({pid});
  watcher.Take(pid);
  int stuck = 0;
  std::string last;
  for (int i = 0; i < samples; ++i) {
    usleep(500 * 1000);
    std::string key = watcher.Take(pid);
    if (!key.empty()) {
      ++stuck;
      last = key;
    }
  }
  return {stuck, last};
}

TEST(HangProgress, ASpinningDeviceWaitIsFoundAndAStepLoopIsNot) {
  DeviceWaitWatcher watcher;
  // One long spin inside "torch.cuda": every span finds it there.
  FakeTorchWaiter stuck("torch.cuda.synchronize(600)\n");
  auto [spans, wait] = WatchSpans(watcher, stuck.pid(), 3);
  EXPECT_EQ(spans, 3);
  EXPECT_NE(wait.find("torch/cuda/__init__.py"), std::string::npos) << wait;
  // Steps of 2 ms in the same wait, each followed by 1 ms of the script's
  // own waiting (a data loader's, say): the reads every 2 ms see it leave.
  // Not in every span on a loaded machine, but a hang needs every span of
  // the timeout: six in a row here. Outside the wait the script sleeps
  // rather than computes: a reader on a busy machine gets a core mostly
  // when the script blocks, so a short computation between the waits was
  // seldom read, and CI once found all six spans in the wait.
  FakeTorchWaiter steps(
      "import time\n"
      "while True:\n"
      "    torch.cuda.synchronize(0.002)\n"
      "    time.sleep(0.001)\n");
  EXPECT_LT(WatchSpans(watcher, steps.pid(), 6).first, 6);
  // The script's own loop is never a device wait; a process not watched
  // has none.
  FakeTorchWaiter own("while True:\n    pass\n");
  EXPECT_EQ(WatchSpans(watcher, own.pid(), 2).first, 0);
  EXPECT_EQ(watcher.Take(stuck.pid()), "");
}

TEST(HangProgress, ADataLoadersWorkersThatEndedStillCount) {
  // A worker whose child computed half a second and was waited for, as a
  // data loader's workers at the end of an epoch: its CPU stays in the
  // worker's count, so the window across their end does not read as idle.
  proc::ReadyChild worker({"/usr/bin/python3", "-c",
                           "import os, time\n"
                           "pid = os.fork()\n"
                           "if pid == 0:\n"
                           "    end = time.process_time() + 0.5\n"
                           "    while time.process_time() < end: pass\n"
                           "    os._exit(0)\n"
                           "os.waitpid(pid, 0)\n"
                           "print('ready', flush=True)\n"
                           "time.sleep(60)\n"});
  ASSERT_TRUE(worker.ready());
  auto own = proc::ReadProcStat(worker.pid());
  ASSERT_TRUE(own.ok());
  EXPECT_GE(own->reaped_children_cpu_seconds, 0.4);
  EXPECT_GE(TreeCpuSeconds(worker.pid()), own->cpu_seconds + 0.4);
}

TEST(HangProgress, OnlyABusySilentWorkersStackIsRead) {
  ProgressWindow w(5);
  EXPECT_FALSE(w.BusyAndSilent(0, 0, 1, 0));  // no sample yet
  w.Quiet(At(0, 1, 1, 10, 10));
  EXPECT_TRUE(w.BusyAndSilent(0, 0.5, 1.4, 10));
  EXPECT_FALSE(w.BusyAndSilent(0, 0.5, 1.4, 11));    // it wrote
  EXPECT_FALSE(w.BusyAndSilent(1, 0.5, 1.001, 10));  // idle
  EXPECT_FALSE(w.BusyAndSilent(2, 0.5, 9, 10));      // no such worker
}

TEST(HangJob, HungOnlyWhenEveryNodeIsQuietForTheTimeout) {
  // Node 0's ranks wait in a barrier; node 1's compute (a checkpoint).
  auto busy = JudgeJob({{0, 5.5, ""}, {1, 0.0, ""}}, 5);
  EXPECT_FALSE(busy.hung);
  EXPECT_DOUBLE_EQ(busy.recheck_in_s, 5);  // node 1 needs a whole timeout
  auto almost = JudgeJob({{0, 6.0, ""}, {1, 4.2, ""}}, 5);
  EXPECT_FALSE(almost.hung);
  EXPECT_DOUBLE_EQ(almost.recheck_in_s, 0.8);
  auto just = JudgeJob({{0, 6.0, ""}, {1, 4.9, ""}}, 5);
  EXPECT_DOUBLE_EQ(just.recheck_in_s, kSamplePeriodS);  // the next sample
  auto all = JudgeJob({{0, 6.0, ""}, {1, 5.0, ""}, {2, 5.9, ""}}, 5);
  EXPECT_TRUE(all.hung);
  EXPECT_TRUE(all.unknown.empty());
}

TEST(HangJob, ANodeThatCannotBeAskedKeepsTheVerdictFromBeingMade) {
  auto v = JudgeJob({{0, 9.0, ""}, {1, std::nullopt, "127.0.0.1:9: connection refused"}}, 5);
  EXPECT_FALSE(v.hung);
  ASSERT_EQ(v.unknown.size(), 1u);
  EXPECT_EQ(v.unknown[0].node_rank, 1);
  EXPECT_DOUBLE_EQ(v.recheck_in_s, 5);
}

// The judge's workers used to be its only trigger: once they had all
// finished (exit 0), nobody judged a job whose other nodes hung, and a
// finished peer, which reports no quiet, kept the verdict from being made.
// A finished node is quiet for good, the judge's own included.
TEST(HangJob, AFinishedNodeIsQuietForGoodAndTheRunningOnesDecide) {
  const NodeQuiet finished0{0, std::nullopt, "", true};
  EXPECT_TRUE(JudgeJob({finished0, {1, 5.2, ""}}, 5).hung);
  auto early = JudgeJob({finished0, {1, 3.0, ""}, {2, std::nullopt, "", true}}, 5);
  EXPECT_FALSE(early.hung);
  EXPECT_TRUE(early.unknown.empty());
  EXPECT_DOUBLE_EQ(early.recheck_in_s, 2.0);
  EXPECT_TRUE(JudgeJob({{0, 9.0, ""}, {1, std::nullopt, "", true}}, 5).hung);
  // Every node finished: the job is done, not hung.
  auto done = JudgeJob({finished0, {1, std::nullopt, "", true}}, 5);
  EXPECT_FALSE(done.hung);
  EXPECT_DOUBLE_EQ(done.recheck_in_s, 5);
  // One that cannot be asked still keeps the verdict from being made.
  auto unknown = JudgeJob({finished0, {1, std::nullopt, "no answer within 1500 ms"}}, 5);
  EXPECT_FALSE(unknown.hung);
  ASSERT_EQ(unknown.unknown.size(), 1u);
  EXPECT_EQ(unknown.unknown[0].node_rank, 1);
}

TEST(HangJob, APeersAnswerSaysHowLongItsWorkersHaveBeenQuiet) {
  auto answer = [](const std::string& text) -> Result<nlohmann::json> {
    return nlohmann::json::parse(text);
  };
  EXPECT_EQ(QuietOf(1, 3, answer(R"({"round": 3, "quiet_seconds": 4.5, "hang": null})")).quiet_s,
            4.5);
  // Another round: it is restarting, which is progress.
  EXPECT_EQ(QuietOf(1, 3, answer(R"({"round": 4, "quiet_seconds": 40})")).quiet_s, 0.0);
  auto unwatched = QuietOf(1, 3, answer(R"({"round": 3, "quiet_seconds": null})"));
  EXPECT_FALSE(unwatched.quiet_s);
  EXPECT_NE(unwatched.error.find("--hang-timeout"), std::string::npos);
  EXPECT_FALSE(QuietOf(1, 3, answer(R"({"workers": []})")).quiet_s);
  // In its exit barrier: no quiet to tell, and none needed.
  auto finished =
      QuietOf(1, 3, nlohmann::json::parse(HangAnswer(1, 3, std::nullopt, true, 5, {}).dump()));
  EXPECT_TRUE(finished.finished);
  EXPECT_TRUE(finished.error.empty());
  EXPECT_FALSE(
      QuietOf(1, 3, answer(R"({"round": 3, "quiet_seconds": 2, "finished": false})")).finished);
  auto failed = QuietOf(2, 3, Status::Timeout("127.0.0.1:9: no answer within 1500 ms"));
  EXPECT_FALSE(failed.quiet_s);
  EXPECT_EQ(failed.error, "127.0.0.1:9: no answer within 1500 ms");
}

TEST(HangJob, TheJudgesVerdictTravelsWhole) {
  auto groups = GroupStacks({Waiting(0), Sleeping(1)});
  auto text = HangAnswer(0, 3, 6.0, false, 5, groups).dump();
  auto heard = VerdictOf(3, nlohmann::json::parse(text));
  ASSERT_TRUE(heard);
  ASSERT_EQ(heard->size(), 2u);
  EXPECT_EQ(HangSummary(*heard), HangSummary(groups));
  EXPECT_TRUE((*heard)[0].odd);
  EXPECT_EQ((*heard)[0].ranks, std::vector<int>{1});
  // None made yet, or one of another round: no verdict.
  EXPECT_FALSE(VerdictOf(3, nlohmann::json::parse(HangAnswer(0, 3, 2.0, false, 5, {}).dump())));
  EXPECT_FALSE(VerdictOf(4, nlohmann::json::parse(text)));
}

TEST(HangJob, TheOddRankIsNamedAcrossNodesWhenItIsAloneOnItsNode) {
  // One worker per node: node 1's rank sleeps, node 0's waits. Each node
  // alone names nobody; the job names rank 1.
  auto node = [](int node_rank, const RankStack& s) {
    nlohmann::ordered_json frames = nlohmann::ordered_json::array();
    for (const auto& f : s.frames) {
      frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
    }
    return nlohmann::ordered_json{
        {"node_rank", node_rank},
        {"workers", {{{"rank", s.rank}, {"threads", {{{"frames", frames}}}}}}}};
  };
  auto job = nlohmann::ordered_json::array({node(0, Waiting(0)), node(1, Sleeping(1))});
  job.push_back({{"node_rank", 2}, {"error", "no answer"}, {"workers", nlohmann::json::array()}});
  auto groups = GroupStacks(JobRankStacks(job));
  EXPECT_EQ(HangSummary(groups),
            "rank 1 is not where the others are: in slow_step at train.py:12; rank 0: in "
            "all_reduce at distributed_c10d.py:1536, called from main at train.py:41");
}

TEST(HangHealth, TheSummaryIsOnHealthOnceMade) {
  GroupHealth h;
  auto before = nlohmann::json::parse(EncodeHealth(h, {}));
  EXPECT_TRUE(before["hang"].is_null());
  h.hang = "rank 3 is not where the others are: in slow_step at train.py:12";
  auto after = nlohmann::json::parse(EncodeHealth(h, {}));
  EXPECT_EQ(after["hang"], h.hang);
}

}  // namespace
}  // namespace trun::agent
