#include "store/pressure.h"

#include <gtest/gtest.h>

#include <string>

namespace trun::store {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const Clock::time_point t0{};

TEST(PartialRequestsTest, CountsWhatUnfinishedRequestsHold) {
  PartialRequests p(100);
  p.Update(1, 40, 40, t0);
  p.Update(2, 30, 30, t0);
  EXPECT_EQ(p.total(), 70u);
  p.Update(1, 10, 50, t0 + seconds(1));
  EXPECT_EQ(p.total(), 80u);
  p.Update(1, 5, 0, t0 + seconds(2));  // its request is whole
  EXPECT_EQ(p.total(), 30u);
  EXPECT_EQ(p.size(), 1u);
  p.Remove(2);
  EXPECT_EQ(p.total(), 0u);
  EXPECT_EQ(p.size(), 0u);
  p.Remove(2);  // twice is harmless
  EXPECT_EQ(p.OverBudget(), std::nullopt);
}

TEST(PartialRequestsTest, OverBudgetClosesTheOneLongestWithoutAByte) {
  PartialRequests p(100);
  p.Update(1, 60, 60, t0);  // stalls from here
  p.Update(2, 30, 30, t0 + seconds(1));
  EXPECT_EQ(p.OverBudget(), std::nullopt);  // 90: under
  p.Update(3, 20, 20, t0 + seconds(2));     // 110: over
  EXPECT_EQ(p.OverBudget(), 1u);
  // The one that holds most but streams is not chosen: 1 gets more bytes
  // now, so 2 has gone longest without one.
  p.Update(1, 10, 70, t0 + seconds(3));
  EXPECT_EQ(p.OverBudget(), 2u);
  p.Remove(2);
  EXPECT_EQ(p.total(), 90u);
  EXPECT_EQ(p.OverBudget(), std::nullopt);
}

TEST(PartialRequestsTest, ARequestMustKeepComingAtTheFloor) {
  PartialRequests p(1 << 30);
  // A trickle: one byte a second.
  for (int i = 0; i < 9; ++i) p.Update(1, 1, static_cast<size_t>(i + 1), t0 + seconds(i));
  // A slow but real link: 100 KiB per 10 s, split over many reads.
  for (int i = 0; i < 100; ++i) p.Update(2, 1024, 1024u * (i + 1), t0 + milliseconds(i * 100));
  EXPECT_TRUE(p.Stalled(t0 + seconds(9)).empty());  // no window ran out yet
  EXPECT_EQ(p.Stalled(t0 + seconds(10)), std::vector<uint64_t>{1});
  p.Remove(1);
  // The slow link's window starts again; it must keep up in the next one too.
  p.Update(2, kPartialFloorBytes - 1, 200000, t0 + seconds(15));
  EXPECT_TRUE(p.Stalled(t0 + seconds(19)).empty());
  EXPECT_EQ(p.Stalled(t0 + seconds(20)), std::vector<uint64_t>{2});
}

TEST(PartialRequestsTest, ARequestThatStopsIsClosedAWindowAfterItsLastByte) {
  PartialRequests p(1 << 30);
  p.Update(1, 4 << 20, 4 << 20, t0);  // most of a large SET at once, then nothing
  p.Update(2, 4 << 20, 4 << 20, t0);  // the same, then more a while later
  p.Update(2, 1 << 20, 5 << 20, t0 + seconds(6));
  EXPECT_TRUE(p.Stalled(t0 + seconds(9)).empty());
  EXPECT_EQ(p.Stalled(t0 + seconds(10)), std::vector<uint64_t>{1});
  p.Remove(1);
  EXPECT_TRUE(p.Stalled(t0 + seconds(15)).empty());
  EXPECT_EQ(p.Stalled(t0 + seconds(16)), std::vector<uint64_t>{2});
}

TEST(PartialRequestsTest, ANewRequestStartsAFreshWindow) {
  PartialRequests p(1 << 30);
  p.Update(1, 5, 5, t0);
  p.Update(1, 5, 0, t0 + seconds(1));  // whole
  p.Update(1, 5, 5, t0 + seconds(8));  // the next one begins
  EXPECT_TRUE(p.Stalled(t0 + seconds(12)).empty());
  EXPECT_EQ(p.Stalled(t0 + seconds(18)), std::vector<uint64_t>{1});
}

TEST(QueuedRepliesTest, OverTheBudgetTheMostUnreadGoesOnceItSatASecond) {
  QueuedReplies q(10);
  q.Update(1, 5, false, t0);
  q.Update(2, 7, false, t0 + milliseconds(100));
  EXPECT_EQ(q.total(), 12u);
  // Over the budget, but nobody's replies sat a second: a burst to
  // readers passes.
  EXPECT_FALSE(q.OverBudget(t0 + milliseconds(500)));
  // 2 drains some of its replies, and holds the most; 1 reads nothing.
  q.Update(2, 6, true, t0 + milliseconds(900));
  EXPECT_EQ(q.OverBudget(t0 + milliseconds(1100)), 1u);
  // Both sat a second: the one that holds the most goes.
  EXPECT_EQ(q.OverBudget(t0 + milliseconds(2000)), 2u);
  std::vector<uint64_t> closed;
  q.CloseOverBudget(t0 + milliseconds(2000), [&](uint64_t c) { closed.push_back(c); });
  EXPECT_EQ(closed, (std::vector<uint64_t>{2}));
  EXPECT_EQ(q.total(), 5u);
  // A queue that empties leaves the books.
  q.Update(1, 0, true, t0 + milliseconds(2100));
  EXPECT_EQ(q.size(), 0u);
}

TEST(QueuedRepliesTest, OverTwiceTheBudgetTheMostGoesAtOnce) {
  QueuedReplies q(10);
  q.Update(1, 12, false, t0);
  q.Update(2, 13, false, t0 + milliseconds(1));
  std::vector<uint64_t> closed;
  q.CloseOverBudget(t0 + milliseconds(2), [&](uint64_t c) { closed.push_back(c); });
  EXPECT_EQ(closed, (std::vector<uint64_t>{2}));  // 12 left: over 10, under 20
  EXPECT_EQ(q.total(), 12u);
}

TEST(RefusalLimiterTest, OneLineAPeriodPerSourceAndReason) {
  RefusalLimiter r(16, seconds(60));
  EXPECT_TRUE(r.Note("10.0.0.1", "wrong token", t0).log);
  EXPECT_FALSE(r.Note("10.0.0.1", "wrong token", t0 + seconds(1)).log);
  EXPECT_FALSE(r.Note("10.0.0.1", "wrong token", t0 + seconds(2)).log);
  EXPECT_TRUE(r.Note("10.0.0.1", "trun's keys", t0 + seconds(2)).log);
  EXPECT_TRUE(r.Note("10.0.0.2", "wrong token", t0 + seconds(2)).log);
  auto d = r.Note("10.0.0.1", "wrong token", t0 + seconds(60));
  EXPECT_TRUE(d.log);
  EXPECT_EQ(d.unlogged, 2u);
  EXPECT_FALSE(d.pooled);
}

TEST(RefusalLimiterTest, ALineSaysWhatWentUnlogged) {
  RefusalLimiter r(1, seconds(60));
  EXPECT_EQ(r.Line("10.0.0.1", "why", "dropped 10.0.0.1", t0), "dropped 10.0.0.1");
  EXPECT_FALSE(r.Line("10.0.0.1", "why", "dropped 10.0.0.1", t0 + seconds(1)));
  EXPECT_EQ(r.Line("10.0.0.1", "why", "dropped 10.0.0.1", t0 + seconds(61)),
            "dropped 10.0.0.1 (and 1 more from it since the last such line)");
  // The table (one row) is full: another source shares the pooled entry.
  EXPECT_EQ(r.Line("10.0.0.2", "why", "dropped 10.0.0.2", t0 + seconds(62)),
            "dropped 10.0.0.2 (refused sources are too many to log each: 0 more from them since "
            "the last such line)");
}

TEST(RefusalLimiterTest, ManySourcesResetNobodysLimitAndShareOneLine) {
  RefusalLimiter r(64, seconds(60));
  EXPECT_TRUE(r.Note("127.0.0.1", "wrong token", t0).log);
  // An attacker with thousands of loopback addresses within the minute.
  int lines = 0, pooled = 0;
  for (int i = 0; i < 5000; ++i) {
    auto d = r.Note("127.1." + std::to_string(i / 256) + "." + std::to_string(i % 256),
                    "wrong token", t0 + milliseconds(i));
    lines += d.log;
    pooled += d.pooled;
  }
  EXPECT_EQ(lines, 63 + 1);  // the table's free rows, then one pooled line
  EXPECT_EQ(pooled, 5000 - 63);
  EXPECT_LE(r.size(), 64u);
  // The first source's limit still holds.
  EXPECT_FALSE(r.Note("127.0.0.1", "wrong token", t0 + seconds(6)).log);
  // A minute on, the old entries make room: a new source is its own again.
  auto d = r.Note("10.1.1.1", "wrong token", t0 + seconds(70));
  EXPECT_TRUE(d.log);
  EXPECT_FALSE(d.pooled);
  EXPECT_LE(r.size(), 64u);
}

}  // namespace
}  // namespace trun::store
