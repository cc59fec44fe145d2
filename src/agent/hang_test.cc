#include "agent/hang.h"

#include <gtest/gtest.h>

#include "agent/telemetry.h"

namespace trun::agent {
namespace {

// One sample of two workers.
ProgressSample At(double t, double cpu0, double cpu1, uint64_t bytes0 = 0, uint64_t bytes1 = 0) {
  return {t, {cpu0, cpu1}, {bytes0, bytes1}};
}

TEST(HangProgress, IdleWorkersAreStalledOnceTheWholeTimeoutIsSeen) {
  ProgressWindow w(5);
  for (int t = 0; t < 5; ++t) EXPECT_FALSE(w.Stalled(At(t, 1.0, 2.0))) << t;
  EXPECT_TRUE(w.Stalled(At(5, 1.0, 2.0)));
  EXPECT_TRUE(w.Stalled(At(6, 1.0, 2.0)));
}

TEST(HangProgress, UnderOnePercentOfACoreIsIdleAndMoreIsProgress) {
  ProgressWindow waiting(5);
  // A waiter's background threads: 0.04 s over 5 s, under 1% of a core.
  for (int t = 0; t <= 4; ++t) waiting.Stalled(At(t, 0.01 * t, 0));
  EXPECT_TRUE(waiting.Stalled(At(5, 0.04, 0)));

  ProgressWindow computing(5);
  // One worker computes (a whole core), the other waits for it.
  for (int t = 0; t <= 10; ++t) EXPECT_FALSE(computing.Stalled(At(t, t, 0))) << t;
}

TEST(HangProgress, OutputIsProgressAndTheWindowMovesOn) {
  ProgressWindow w(3);
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

TEST(HangGroups, StacksOfADocumentAreTheMainThreads) {
  auto doc = nlohmann::ordered_json::parse(R"({"workers": [
    {"rank": 4, "error": null, "threads": [
      {"frames": [{"function": "f", "file": "/a.py", "line": 3}]},
      {"frames": [{"function": "g", "file": "/b.py", "line": 9}]}]},
    {"rank": 5, "error": "not a Python", "threads": []}]})");
  auto stacks = RankStacksOf(doc);
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(Where(stacks[0]), "in f at a.py:3");
  EXPECT_EQ(Where(stacks[1]), "no stack: not a Python");
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
