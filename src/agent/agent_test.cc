// The agent's state machine driven with a fake process table: workers that
// exit as each test scripts, on the agent's real event loop (a one-node
// static rendezvous, short grace periods), and where a test says so with the
// supervisor's clock virtual (proc::VirtualLoop).
#include "agent/agent.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "common/exit_code.h"
#include "proc/fake_process_table.h"

namespace trun::agent {
namespace {

using proc::FakeProcessTable;

launch::LaunchConfig Config(int nproc) {
  launch::LaunchConfig c;
  c.nproc_per_node = nproc;
  c.worker_argv = {"fake-worker"};
  c.entrypoint_name = "fake-worker";
  c.log_dir = "/dev/null";
  c.shutdown_timeout_s = 0.05;
  return c;
}

class AgentTest : public ::testing::Test {
 protected:
  // Runs the agent; `script(fake, pid, local_rank, restart_count)` decides
  // each spawned worker's life.
  int Run(launch::LaunchConfig config,
          std::function<void(FakeProcessTable&, pid_t, int, int)> script,
          LocalAgent::LoopFactory loop = {}) {
    // The agent owns the table: it is kept until the test's end.
    agent_.emplace(
        std::move(config),
        [this, script](asio::io_context& io) {
          auto t = std::make_unique<FakeProcessTable>();
          fake_ = t.get();
          t->set_auto_deliver([&io](std::function<void()> fn) { asio::post(io, std::move(fn)); });
          if (when_ready_) {
            t->set_when_ready(
                [this, &io](std::function<void()> ready) { when_ready_(io, std::move(ready)); });
          }
          t->set_on_spawn([this, script](pid_t pid, const proc::SpawnOptions&) {
            script(*fake_, pid, std::stoi(fake_->env(pid, "LOCAL_RANK")),
                   std::stoi(fake_->env(pid, "TORCHELASTIC_RESTART_COUNT")));
          });
          return Result<std::unique_ptr<proc::ProcessTable>>(std::move(t));
        },
        std::move(loop));
    int code = agent_->Run();
    spawned_ = fake_->spawned();
    return code;
  }

  // The supervisor's clock, virtual (clock_).
  LocalAgent::LoopFactory VirtualClock() {
    return [this](asio::io_context& io) {
      auto l = std::make_unique<proc::VirtualLoop>(io);
      clock_ = l.get();
      return std::unique_ptr<proc::Loop>(std::move(l));
    };
  }

  // Set before Run: the table's readiness, as the test scripts it.
  std::function<void(asio::io_context&, std::function<void()>)> when_ready_;
  std::optional<LocalAgent> agent_;
  FakeProcessTable* fake_ = nullptr;
  proc::VirtualLoop* clock_ = nullptr;
  std::vector<pid_t> spawned_;
};

TEST_F(AgentTest, EveryWorkerExitingZeroSucceeds) {
  int code = Run(Config(3), [](FakeProcessTable& t, pid_t pid, int, int) { t.Exit(pid, 0); });
  EXPECT_EQ(code, kExitSuccess);
  ASSERT_EQ(spawned_.size(), 3u);
  for (int lr = 0; lr < 3; ++lr) {
    pid_t pid = spawned_[static_cast<size_t>(lr)];
    EXPECT_EQ(fake_->env(pid, "RANK"), std::to_string(lr));
    EXPECT_EQ(fake_->env(pid, "WORLD_SIZE"), "3");
    EXPECT_TRUE(fake_->process(pid).options.new_process_group);
  }
}

// Issue 30: the agent blocked its loop in the first warm Spawn until the
// warm process had imported torch (20 s on a loaded machine), so a host's
// store went silent and the peers took it for lost. It waits on the loop.
TEST_F(AgentTest, WorkersStartOnceTheTableIsReadyAndTheLoopRunsMeanwhile) {
  bool loop_ran_without_workers = false;
  size_t spawned_before_ready = 1;
  when_ready_ = [&](asio::io_context& io, std::function<void()> ready) {
    asio::post(io, [&] { loop_ran_without_workers = fake_->spawned().empty(); });
    auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(30));
    timer->async_wait([&, timer, ready](std::error_code) {
      spawned_before_ready = fake_->spawned().size();
      ready();
    });
  };
  int code = Run(Config(2), [](FakeProcessTable& t, pid_t pid, int, int) { t.Exit(pid, 0); });
  EXPECT_EQ(code, kExitSuccess);
  EXPECT_TRUE(loop_ran_without_workers);
  EXPECT_EQ(spawned_before_ready, 0u);
  EXPECT_EQ(spawned_.size(), 2u);
}

TEST_F(AgentTest, AFailureStopsTheSiblingsAndFailsTheJob) {
  int code = Run(Config(2), [](FakeProcessTable& t, pid_t pid, int lr, int) {
    if (lr == 1) t.Exit(pid, 1);
  });
  EXPECT_EQ(code, kExitFailed);
  ASSERT_EQ(spawned_.size(), 2u);
  EXPECT_EQ(fake_->process(spawned_[0]).signals.front(), SIGTERM);
  EXPECT_FALSE(fake_->alive(spawned_[0]));
  EXPECT_EQ(fake_->forgotten().size(), 2u);  // the sentinel forgets both groups
}

TEST_F(AgentTest, ARestartRunsTheGroupAgain) {
  auto c = Config(2);
  c.max_restarts = 2;
  int code = Run(c, [](FakeProcessTable& t, pid_t pid, int lr, int restart) {
    if (restart == 0 && lr == 1) t.Exit(pid, 1);
    if (restart == 1) t.Exit(pid, 0);
  });
  EXPECT_EQ(code, kExitSuccess);
  ASSERT_EQ(spawned_.size(), 4u);
  EXPECT_EQ(fake_->env(spawned_[2], "TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(fake_->env(spawned_[3], "RANK"), "1");
}

TEST_F(AgentTest, TheRestartBudgetRunsOut) {
  auto c = Config(1);
  c.max_restarts = 2;
  int code = Run(c, [](FakeProcessTable& t, pid_t pid, int, int) { t.Exit(pid, 3); });
  EXPECT_EQ(code, kExitFailed);
  EXPECT_EQ(spawned_.size(), 3u);  // the first attempt and two restarts
}

TEST_F(AgentTest, ASiblingThatIgnoresSigtermIsKilledAfterTheGrace) {
  int code = Run(Config(2), [](FakeProcessTable& t, pid_t pid, int lr, int) {
    if (lr == 0) t.IgnoreSigterm(pid);
    if (lr == 1) t.Exit(pid, 1);
  });
  EXPECT_EQ(code, kExitFailed);
  EXPECT_EQ(fake_->process(spawned_[0]).signals,
            (std::vector<int>{SIGTERM, SIGKILL, SIGKILL}));  // term, grace's kill, release
}

TEST_F(AgentTest, TheGraceIsTheShutdownTimeoutOnTheSupervisorsClock) {
  auto c = Config(2);
  c.shutdown_timeout_s = 600;  // ten minutes, on a virtual clock
  int code = Run(
      c,
      [](FakeProcessTable& t, pid_t pid, int lr, int) {
        if (lr == 0) t.IgnoreSigterm(pid);
        if (lr == 1) t.Exit(pid, 1);
      },
      VirtualClock());
  EXPECT_EQ(code, kExitFailed);
  EXPECT_EQ(clock_->delays(), (std::vector<std::chrono::milliseconds>{std::chrono::minutes(10)}));
  EXPECT_EQ(clock_->now(), std::chrono::minutes(10));
  EXPECT_EQ(fake_->process(spawned_[0]).signals, (std::vector<int>{SIGTERM, SIGKILL, SIGKILL}));
}

TEST_F(AgentTest, ASiblingThatExitsOnSigtermNeedsNoGrace) {
  auto c = Config(2);
  c.shutdown_timeout_s = 600;
  int code = Run(
      c,
      [](FakeProcessTable& t, pid_t pid, int lr, int) {
        if (lr == 1) t.Exit(pid, 1);
      },
      VirtualClock());
  EXPECT_EQ(code, kExitFailed);
  // The grace was asked for, and cancelled when the sibling went: no time passed.
  EXPECT_EQ(clock_->delays().size(), 1u);
  EXPECT_EQ(clock_->now(), std::chrono::milliseconds(0));
}

TEST_F(AgentTest, ASpawnFailureKillsWhatStartedAndExits3) {
  int code = Run(Config(3), [](FakeProcessTable& t, pid_t, int lr, int) {
    if (lr == 0) t.FailNextSpawn(Status::NotFound("fake-worker was not found on PATH"));
  });
  EXPECT_EQ(code, kExitCannot);
  ASSERT_EQ(spawned_.size(), 1u);
  EXPECT_EQ(fake_->process(spawned_[0]).signals.front(), SIGKILL);
}

}  // namespace
}  // namespace trun::agent
