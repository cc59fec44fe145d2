#include "proc/command.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace trun::proc {
namespace {

TEST(RunCommand, CapturesBothStreamsAndTheExitCode) {
  auto r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST(RunCommand, ATimeoutKillsTheGroupAndKeepsWhatWasPrinted) {
  auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({"sh", "-c", "echo started; sleep 30 & sleep 30"}, 0.3);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, -9);
  EXPECT_EQ(r->out, "started\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(RunCommand, AMissingProgramIsNotFound) {
  auto r = RunCommand({"trun-no-such-program"}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(RunCommand, SeveralThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r = RunCommand({"echo", std::to_string(i)}, 10);
      if (r.ok()) outs[i] = r->out;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(outs[i], std::to_string(i) + "\n");
}

}  // namespace
}  // namespace trun::proc
