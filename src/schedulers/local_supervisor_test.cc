// The local scheduler's supervisor on a fake process table: replicas that
// exit as each test scripts, on the supervisor's real event loop, with its
// real request.json, state.json, log files and error files in a temporary
// app directory.
#include "schedulers/local_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "common/files.h"
#include "proc/fake_process_table.h"
#include "schedulers/local_state.h"

namespace trun::schedulers {
namespace {

namespace fs = std::filesystem;
using proc::FakeProcessTable;
using specs::AppState;

class LocalSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(::testing::TempDir()) / fmt::format("supervisor-{}-{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    ASSERT_TRUE(local::MakePrivateDirs(dir_.string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One role, "trainer", of `replicas` replicas; replica k's argv is
  // {"worker", "k"}.
  local::Request Request(int replicas, int max_retries, specs::RetryPolicy policy) {
    local::Request req;
    req.app_id = "train-x1";
    req.session = "s";
    req.app_dir = dir_.string();
    req.stop_timeout_s = 30;
    local::RoleRequest role;
    role.name = "trainer";
    role.max_retries = max_retries;
    role.retry_policy = policy;
    for (int k = 0; k < replicas; ++k) {
      local::ReplicaRequest r;
      r.id = k;
      r.argv = {"worker", std::to_string(k)};
      r.cwd = dir_.string();
      r.log_dir = (dir_ / "trainer" / std::to_string(k)).string();
      EXPECT_TRUE(local::MakePrivateDirs(r.log_dir).ok());
      role.replicas.push_back(r);
    }
    req.roles.push_back(role);
    return req;
  }

  // Runs the supervisor on `req` to its end; `script(fake, pid, replica,
  // attempt)` decides each spawned replica's life (attempt 1 is the first).
  // The final state.json.
  local::State Run(const local::Request& req,
                   std::function<void(FakeProcessTable&, pid_t, int, int)> script) {
    EXPECT_TRUE(WriteFileAtomic((dir_ / "request.json").string(), local::ToJson(req).dump()).ok());
    local::State st = local::SubmittedState(req, "train");
    EXPECT_TRUE(local::WriteState(dir_.string(), st).ok());
    int code = RunLocalSupervisor(
        dir_.string(), -1,
        [&](asio::io_context& io) -> Result<std::unique_ptr<proc::ProcessTable>> {
          auto t = std::make_unique<FakeProcessTable>();
          FakeProcessTable* fake = t.get();
          t->set_auto_deliver([&io](std::function<void()> fn) { asio::post(io, std::move(fn)); });
          t->set_on_spawn([this, fake, script](pid_t pid, const proc::SpawnOptions& o) {
            const int replica = std::stoi(o.argv.at(1));
            spawns_.push_back(replica);
            script(*fake, pid, replica,
                   static_cast<int>(std::count(spawns_.begin(), spawns_.end(), replica)));
          });
          return std::unique_ptr<proc::ProcessTable>(std::move(t));
        });
    EXPECT_EQ(code, 0);
    auto final_state = local::ReadState(dir_.string());
    EXPECT_TRUE(final_state.ok()) << final_state.status().message();
    return final_state.ok() ? *final_state : local::State{};
  }

  // What trun's agent or torch's @record leaves in the replica's error file.
  void WriteErrorFile(const local::Request& req, int replica, const std::string& message,
                      int64_t timestamp) {
    const std::string text =
        fmt::format(R"({{"message": {{"message": "{}", "extraInfo": {{"timestamp": "{}"}}}}}})",
                    message, timestamp);
    ASSERT_TRUE(WriteFileAtomic(req.roles[0].replicas.at(replica).ErrorFile(), text).ok());
  }

  // Sets the replica's error file's modification time: 1700000000 s and `ns`.
  void DateErrorFile(const local::Request& req, int replica, long ns) {
    const timespec t[2] = {{.tv_sec = 1700000000, .tv_nsec = ns},
                           {.tv_sec = 1700000000, .tv_nsec = ns}};
    const std::string path = req.roles[0].replicas.at(replica).ErrorFile();
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  }
  // Two replicas fail within one second: replica 0 of a peer's closed
  // connection, replica 1 of the exception that closed it. Their error
  // files are dated 1700000000 s and `ns0` / `ns1`; `zero_ends_first` says
  // whose exit the supervisor sees first. The final state.
  local::State FailWithinOneSecond(long ns0, long ns1, bool zero_ends_first) {
    local::Request req = Request(2, 0, specs::RetryPolicy::kApplication);
    WriteErrorFile(req, 0, "Connection closed by peer", 1700000000);
    WriteErrorFile(req, 1, "ValueError: boom", 1700000000);
    DateErrorFile(req, 0, ns0);
    DateErrorFile(req, 1, ns1);
    pid_t zero = 0;
    return Run(req, [&zero, zero_ends_first](FakeProcessTable& t, pid_t pid, int replica, int) {
      if (replica == 0) zero = pid;
      if (replica == 1) {
        t.Exit(zero_ends_first ? zero : pid, 1);
        t.Exit(zero_ends_first ? pid : zero, 1);
      }
    });
  }
  fs::path dir_;
  std::vector<int> spawns_;  // the replica of each spawn, in order
};

TEST_F(LocalSupervisorTest, AllReplicasExitingZeroSucceeds) {
  local::State st = Run(Request(2, 0, specs::RetryPolicy::kApplication),
                        [](FakeProcessTable& t, pid_t pid, int, int) { t.Exit(pid, 0); });
  EXPECT_EQ(st.state, AppState::kSucceeded);
  EXPECT_EQ(spawns_, (std::vector<int>{0, 1}));
  for (const auto& r : st.roles[0].replicas) {
    EXPECT_EQ(r.state, AppState::kSucceeded);
    EXPECT_EQ(r.exitcode, 0);
  }
  EXPECT_EQ(st.num_restarts, 0);
  EXPECT_EQ(st.structured_error_msg, specs::kNone);
  EXPECT_GT(st.finished_at, 0);
}

// replica policy: only the failed replica restarts, until its role's
// retries are spent; then the rest are stopped and the app is FAILED.
TEST_F(LocalSupervisorTest, ReplicaRetriesThenFailsAfterTheLast) {
  local::State st = Run(Request(2, 2, specs::RetryPolicy::kReplica),
                        [](FakeProcessTable& t, pid_t pid, int replica, int) {
                          if (replica == 0) t.Exit(pid, 3);  // replica 1 runs until stopped
                        });
  EXPECT_EQ(st.state, AppState::kFailed);
  EXPECT_EQ(spawns_, (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(st.num_restarts, 2);
  EXPECT_EQ(st.roles[0].restarts, 2);
  EXPECT_EQ(st.roles[0].replicas[0].state, AppState::kFailed);
  EXPECT_EQ(st.roles[0].replicas[0].exitcode, 3);
  // Stopped, not failed on its own.
  EXPECT_EQ(st.roles[0].replicas[1].state, AppState::kCancelled);
  EXPECT_EQ(st.roles[0].replicas[1].exitcode, -SIGTERM);
  EXPECT_NE(st.msg.find("replica trainer/0 exited with 3"), std::string::npos) << st.msg;
  EXPECT_NE(st.msg.find("used its 2 retries"), std::string::npos) << st.msg;
}

// application policy: a failure restarts every replica, the failed one and
// the ones still running (stopped first: replica 1's first process ends only
// by the fake's SIGTERM); the second attempt succeeds.
TEST_F(LocalSupervisorTest, ApplicationRetryRestartsEachReplica) {
  local::State st = Run(Request(2, 1, specs::RetryPolicy::kApplication),
                        [](FakeProcessTable& t, pid_t pid, int replica, int attempt) {
                          if (attempt == 2) {
                            t.Exit(pid, 0);
                          } else if (replica == 0) {
                            t.Exit(pid, 1);
                          }
                        });
  EXPECT_EQ(st.state, AppState::kSucceeded);
  EXPECT_EQ(spawns_, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(st.num_restarts, 1);
  EXPECT_EQ(st.roles[0].restarts, 1);
  for (const auto& r : st.roles[0].replicas) EXPECT_EQ(r.state, AppState::kSucceeded);
}

// Two replicas fail together: the root cause is the earlier failure by its
// error file's time, not the one reaped first.
TEST_F(LocalSupervisorTest, RootCauseIsTheFirstFailureByTime) {
  local::Request req = Request(3, 0, specs::RetryPolicy::kApplication);
  WriteErrorFile(req, 0, "reaped first, failed later", 1800000000);
  WriteErrorFile(req, 1, "failed first", 1700000000);
  local::State st = Run(req, [](FakeProcessTable& t, pid_t pid, int replica, int) {
    if (replica < 2) t.Exit(pid, 1);
  });
  EXPECT_EQ(st.state, AppState::kFailed);
  EXPECT_NE(st.structured_error_msg.find("failed first"), std::string::npos)
      << st.structured_error_msg;
  EXPECT_NE(st.msg.find("replica trainer/1 exited with 1"), std::string::npos) << st.msg;
  EXPECT_EQ(st.roles[0].replicas[0].state, AppState::kFailed);
  EXPECT_NE(st.roles[0].replicas[0].structured_error_msg.find("failed later"), std::string::npos);
  EXPECT_EQ(st.roles[0].replicas[1].state, AppState::kFailed);
  EXPECT_EQ(st.roles[0].replicas[2].state, AppState::kCancelled);
}

// Within one second, and files written at the same time, the failure seen
// first is the root cause, not the lower replica: replica 0 failed because
// replica 1 had (its peer gone).
TEST_F(LocalSupervisorTest, RootCauseWithinOneSecondIsTheFailureSeenFirst) {
  local::State st = FailWithinOneSecond(500'000'000, 500'000'000, /*zero_ends_first=*/false);
  EXPECT_EQ(st.state, AppState::kFailed);
  EXPECT_NE(st.structured_error_msg.find("boom"), std::string::npos) << st.structured_error_msg;
  EXPECT_NE(st.msg.find("replica trainer/1 exited with 1"), std::string::npos) << st.msg;
}

// Within one second, the replica whose error file was written first is the
// root cause, even when its agent ended later (it was stopping its other
// workers): the agent's file keeps its worker's time (failure.h).
TEST_F(LocalSupervisorTest, RootCauseWithinOneSecondIsTheFileWrittenFirst) {
  local::State st = FailWithinOneSecond(900'000'000, 100'000'000, /*zero_ends_first=*/true);
  EXPECT_EQ(st.state, AppState::kFailed);
  EXPECT_NE(st.structured_error_msg.find("boom"), std::string::npos) << st.structured_error_msg;
  EXPECT_NE(st.msg.find("replica trainer/1 exited with 1"), std::string::npos) << st.msg;
}

}  // namespace
}  // namespace trun::schedulers
