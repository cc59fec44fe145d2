#include "agent/flight_recorder.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proc/ready_child_for_tests.h"

namespace trun::agent {
namespace {

using namespace std::string_literals;

TEST(FlightRecorder, TheDumpsPathIsTorchsPrefixThenTheRank) {
  EXPECT_EQ(DumpPath("", 3), "/tmp/nccl_trace_rank_3");
  EXPECT_EQ(DumpPath("A=1\0TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/d/t_\0B=2\0"s, 7), "/d/t_7");
  // The newer name wins over the older, wherever it stands.
  EXPECT_EQ(DumpPath("TORCH_FR_DUMP_TEMP_FILE=/new_\0TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/old_\0"s, 0),
            "/new_0");
  EXPECT_EQ(DumpPath("TORCH_NCCL_DEBUG_INFO_TEMP_FILE=\0"s, 1), "/tmp/nccl_trace_rank_1");
}

// A stand-in for torch's heartbeat monitor, as ProcessGroupNCCL's DumpPipe
// behaves: it makes "<stem><rank>.pipe", holds it open for reading without
// blocking, polls it, and on a byte writes 1000 bytes to "<prefix><rank>"
// (prefix from its environment). With `dumps` false it never writes.
class StandIn {
 public:
  StandIn(const std::filesystem::path& dir, int rank, bool dumps) {
    const std::string script =
        "import os, sys, time\n"
        "p = sys.argv[1]; os.mkfifo(p); fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    try: b = os.read(fd, 128)\n"
        "    except BlockingIOError: b = b''\n"
        "    if b and sys.argv[2] == '1':\n"
        "        open(os.environ['TORCH_NCCL_DEBUG_INFO_TEMP_FILE'] + sys.argv[3], 'wb')"
        ".write(b'x' * 1000)\n"
        "    time.sleep(0.05)\n";
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     "-c",
                                     script,
                                     (dir / ("fr_" + std::to_string(rank) + ".pipe")).string(),
                                     dumps ? "1" : "0",
                                     std::to_string(rank)};
    std::vector<std::string> env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + (dir / "dump_").string()};
    child_.emplace(std::move(argv), std::move(env));
  }
  pid_t pid() const { return child_->pid(); }
  bool ready() const { return child_->ready(); }

 private:
  std::optional<proc::ReadyChild> child_;
};

class FlightRecorderDumps : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trun-fr-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(FlightRecorderDumps, AWorkerWithItsPipeOpenDumpsOnAByte) {
  StandIn ten(dir_, 10, true);
  StandIn zero(dir_, 0, true);
  ASSERT_TRUE(ten.ready() && zero.ready());
  // Rank 0's pipe is "fr_0.pipe", not rank 10's "fr_10.pipe".
  auto pipe = FindDumpPipe(zero.pid(), 0);
  ASSERT_TRUE(pipe);
  EXPECT_EQ(pipe->name, (dir_ / "fr_0.pipe").string());
  // A process without a pipe (this one) is left out.
  auto dumps = CollectDumps({{0, zero.pid()}, {10, ten.pid()}, {5, getpid()}}, 10);
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].rank, 0);
  EXPECT_EQ(dumps[0].error, "");
  EXPECT_EQ(dumps[0].path, (dir_ / "dump_0").string());
  EXPECT_EQ(dumps[0].bytes, 1000u);
  EXPECT_EQ(dumps[1].path, (dir_ / "dump_10").string());
  EXPECT_EQ(dumps[1].bytes, 1000u);
}

TEST_F(FlightRecorderDumps, NoDumpWithinTheWaitIsNamed) {
  StandIn mute(dir_, 2, false);
  ASSERT_TRUE(mute.ready());
  auto dumps = CollectDumps({{2, mute.pid()}}, 0.5);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].bytes, 0u);
  EXPECT_NE(dumps[0].error.find("no dump at " + (dir_ / "dump_2").string()), std::string::npos)
      << dumps[0].error;
}

TEST_F(FlightRecorderDumps, NobodyWithoutAPipeIsAsked) {
  EXPECT_TRUE(CollectDumps({{0, getpid()}}, 5).empty());
  EXPECT_FALSE(FindDumpPipe(getpid(), 0));
}

}  // namespace
}  // namespace trun::agent
