#include "proc/group_supervisor.h"

#include <gtest/gtest.h>

#include "proc/fake_process_table.h"

namespace trun::proc {
namespace {

using std::chrono::milliseconds;

class GroupSupervisorTest : public ::testing::Test {
 protected:
  GroupSupervisorTest()
      : sup_(table_, loop_,
             {.on_exit = [this](const GroupExit& e) { exits_.push_back(e); },
              .after_exits = [this] { ++batches_; },
              .on_grace_expired = [this] { ++expired_; }}) {}

  pid_t Start() {
    SpawnOptions o;
    o.argv = {"worker"};
    auto pid = sup_.Start(o);
    EXPECT_TRUE(pid.ok());
    return *pid;
  }

  FakeProcessTable table_;
  FakeLoop loop_;
  std::vector<GroupExit> exits_;
  int batches_ = 0;
  int expired_ = 0;
  GroupSupervisor sup_;
};

TEST_F(GroupSupervisorTest, StartsEachProcessAsAGroupLeader) {
  SpawnOptions o;
  o.argv = {"worker"};
  o.new_process_group = false;
  auto pid = sup_.Start(o);
  ASSERT_TRUE(pid.ok());
  EXPECT_TRUE(table_.process(*pid).options.new_process_group);
  EXPECT_TRUE(sup_.running(*pid));
  EXPECT_EQ(sup_.live(), 1);
}

TEST_F(GroupSupervisorTest, ASpawnFailureLeavesNothingTracked) {
  table_.FailNextSpawn(Status::IOError("cannot execute worker"));
  SpawnOptions o;
  o.argv = {"worker"};
  auto pid = sup_.Start(o);
  EXPECT_FALSE(pid.ok());
  EXPECT_EQ(sup_.live(), 0);
}

TEST_F(GroupSupervisorTest, ReportsExitsInReapOrderThenTheBatch) {
  pid_t a = Start(), b = Start();
  table_.Exit(b, 1);
  table_.Exit(a, 0);
  table_.Deliver();
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_EQ(exits_[0].pid, b);
  EXPECT_EQ(exits_[0].exitcode, 1);
  EXPECT_FALSE(exits_[0].stopped);
  EXPECT_EQ(exits_[1].pid, a);
  EXPECT_EQ(batches_, 1);
  EXPECT_EQ(sup_.live(), 0);
}

TEST_F(GroupSupervisorTest, IgnoresReapedOrphans) {
  Start();
  table_.Exit(Start(), 0);
  table_.AddOrphan(999);
  table_.Deliver();
  EXPECT_EQ(exits_.size(), 1u);
}

TEST_F(GroupSupervisorTest, StopSignalsEachGroupAndContinuesOnceAllExited) {
  pid_t a = Start(), b = Start();
  bool done = false;
  sup_.StopAll(SIGTERM, milliseconds(30000), [&] { done = true; });
  EXPECT_EQ(table_.process(a).signals, std::vector<int>{SIGTERM});
  EXPECT_EQ(table_.process(b).signals, std::vector<int>{SIGTERM});
  EXPECT_FALSE(done);  // never from inside the call
  table_.Deliver();
  EXPECT_TRUE(done);
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_TRUE(exits_[0].stopped);
  EXPECT_EQ(exits_[0].exitcode, -SIGTERM);
  EXPECT_EQ(loop_.pending_timers(), 0u);  // the grace timer is cancelled
  EXPECT_FALSE(sup_.stopping());
}

TEST_F(GroupSupervisorTest, StopWithNothingRunningContinuesFromTheLoop) {
  bool done = false;
  sup_.StopAll(SIGTERM, milliseconds(1000), [&] { done = true; });
  EXPECT_FALSE(done);
  loop_.RunPosted();
  EXPECT_TRUE(done);
}

TEST_F(GroupSupervisorTest, SigkillsWhatOutlivesTheGrace) {
  table_.set_ignore_sigterm(true);
  pid_t a = Start();
  bool done = false;
  sup_.StopAll(SIGTERM, milliseconds(500), [&] { done = true; });
  loop_.Advance(milliseconds(499));
  EXPECT_EQ(expired_, 0);
  EXPECT_TRUE(table_.alive(a));
  loop_.Advance(milliseconds(1));
  EXPECT_EQ(expired_, 1);
  EXPECT_EQ(table_.process(a).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  table_.Deliver();
  EXPECT_TRUE(done);
  EXPECT_EQ(exits_.at(0).exitcode, -SIGKILL);
}

TEST_F(GroupSupervisorTest, SigkillStopArmsNoTimer) {
  Start();
  sup_.StopAll(SIGKILL, milliseconds(500), [] {});
  EXPECT_EQ(loop_.pending_timers(), 0u);
}

TEST_F(GroupSupervisorTest, KillStoppingEndsTheGraceAtOnce) {
  table_.set_ignore_sigterm(true);
  pid_t a = Start();
  pid_t b = Start();
  sup_.Stop({a}, SIGTERM, milliseconds(30000), [] {});
  sup_.KillStopping();
  EXPECT_FALSE(table_.alive(a));
  EXPECT_TRUE(table_.alive(b));  // not being stopped
}

TEST_F(GroupSupervisorTest, AStopUnderWayIsJoined) {
  table_.set_ignore_sigterm(true);
  pid_t a = Start(), b = Start();
  int first = 0, second = 0;
  sup_.Stop({a}, SIGTERM, milliseconds(1000), [&] { ++first; });
  loop_.Advance(milliseconds(600));
  sup_.Stop({b}, SIGTERM, milliseconds(1000), [&] { ++second; });
  // The first grace timer stands: both are killed at 1000 ms.
  loop_.Advance(milliseconds(400));
  EXPECT_FALSE(table_.alive(a));
  EXPECT_FALSE(table_.alive(b));
  table_.Deliver();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
}

TEST_F(GroupSupervisorTest, AGroupIsSignalledOncePerStop) {
  table_.set_ignore_sigterm(true);
  pid_t a = Start();
  sup_.Stop({a}, SIGTERM, milliseconds(1000), [] {});
  sup_.Stop({a}, SIGTERM, milliseconds(1000), [] {});
  EXPECT_EQ(table_.process(a).signals, std::vector<int>{SIGTERM});
}

TEST_F(GroupSupervisorTest, ReleaseKillsTheRestOfTheGroupAndForgetsIt) {
  pid_t a = Start();
  table_.Exit(a, 0);
  table_.Deliver();
  sup_.Release(a);
  EXPECT_EQ(table_.process(a).signals, std::vector<int>{SIGKILL});
  EXPECT_EQ(table_.forgotten(), std::vector<pid_t>{a});
  EXPECT_FALSE(sup_.running(a));
}

TEST_F(GroupSupervisorTest, KillOrphansTakesEveryOtherChild) {
  table_.AddOrphan(4242);
  auto killed = sup_.KillOrphans();
  EXPECT_EQ(killed, std::vector<pid_t>{4242});
}

}  // namespace
}  // namespace trun::proc
