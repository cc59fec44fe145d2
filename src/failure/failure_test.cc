#include "failure/failure.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace trun::failure {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name + std::to_string(::getpid());
}

TEST(FailureTest, ReadsTorchRecordFiles) {
  std::string path = TempPath("error.json");
  std::ofstream(path) << R"({"message": {"message": "ValueError: boom", "extraInfo": )"
                      << R"({"py_callstack": "Traceback\nValueError: boom", "timestamp": "100"}}})";
  auto f = DescribeFailure(1, 5, 42, 1, path, 999);
  EXPECT_EQ(f.timestamp, 100);
  EXPECT_EQ(f.message, "Traceback\n  ValueError: boom");
  EXPECT_EQ(f.error_file, path);
  std::remove(path.c_str());
}

TEST(FailureTest, ReadsTheOlderStringForm) {
  std::string path = TempPath("old.json");
  std::ofstream(path) << R"({"message": "plain text", "timestamp": 7})";
  auto f = DescribeFailure(0, 0, 1, 1, path, 999);
  EXPECT_EQ(f.message, "plain text");
  EXPECT_EQ(f.timestamp, 7);
  std::remove(path.c_str());
}

TEST(FailureTest, SignalsAndMissingFiles) {
  auto f = DescribeFailure(0, 0, 77, -9, "/nonexistent/error.json", 5);
  EXPECT_EQ(f.message, "Signal 9 (SIGKILL) received by PID 77");
  EXPECT_EQ(f.error_file, "<N/A>");
  EXPECT_EQ(f.timestamp, 5);
  auto g = DescribeFailure(0, 0, 77, 3, "", 5);
  EXPECT_NE(g.message.find("pytorch.org/docs/stable/elastic/errors.html"), std::string::npos);
}

TEST(FailureTest, TornFileIsReportedNotFatal) {
  std::string path = TempPath("torn.json");
  std::ofstream(path) << R"({"message": {"mess)";
  auto f = DescribeFailure(0, 0, 1, 1, path, 3);
  EXPECT_NE(f.message.find("unreadable error file"), std::string::npos);
  EXPECT_EQ(f.timestamp, 3);
  std::remove(path.c_str());
}

TEST(FailureTest, RootCauseIsEarliestThenLowestRank) {
  std::vector<WorkerFailure> fs(3);
  fs[0].global_rank = 2, fs[0].timestamp = 10;
  fs[1].global_rank = 1, fs[1].timestamp = 10;
  fs[2].global_rank = 0, fs[2].timestamp = 11;
  EXPECT_EQ(RootCause(fs), 1u);
  // Among one agent's workers the files' times do not count (torchrun's
  // rule), only between agents' files (FailureKey::written_ns).
  fs[0].written_ns = 10'100'000'000, fs[1].written_ns = 10'900'000'000;
  EXPECT_EQ(RootCause(fs), 1u);
  // A sibling stopped after the failure is never the root cause, even when
  // it is dated the same second with a lower rank.
  fs[1].stopped = true;
  fs[2].timestamp = 10;
  fs[2].stopped = true;
  EXPECT_EQ(RootCause(fs), 0u);
}

// The root cause follows the failures as they come, and a later one
// replaces it only by the rule: a stopped sibling never does, an earlier
// failure seen late does.
TEST(FailureTest, AttemptFailuresKeepTheRootAsTheyCome) {
  AttemptFailures fs;
  EXPECT_TRUE(fs.empty());
  WorkerFailure first;
  first.global_rank = 3, first.timestamp = 10;
  fs.Add(first);
  EXPECT_EQ(fs.root().global_rank, 3);
  WorkerFailure sibling;
  sibling.global_rank = 0, sibling.timestamp = 9, sibling.stopped = true;
  fs.Add(sibling);
  EXPECT_EQ(fs.root().global_rank, 3);
  WorkerFailure earlier;
  earlier.global_rank = 5, earlier.timestamp = 9;
  fs.Add(earlier);
  EXPECT_EQ(fs.root().global_rank, 5);
  EXPECT_EQ(fs.all().size(), 3u);
  EXPECT_EQ(RootCause(fs.all()), 2u);
  fs.Clear();
  EXPECT_TRUE(fs.empty());
  fs.Add(sibling);
  EXPECT_EQ(fs.root().global_rank, 0);
}

TEST(FailureTest, WithinASecondAnErrorFileComesFirst) {
  std::vector<FailureKey> fs = {
      {.timestamp = 10, .has_error_file = false, .rank = 0},
      {.timestamp = 10, .has_error_file = true, .rank = 1},
      {.timestamp = 9, .has_error_file = false, .rank = 2, .stopped = true}};
  EXPECT_EQ(RootCause(fs), 1u);
  // An earlier failure wins, file or not.
  fs[0].timestamp = 9;
  EXPECT_EQ(RootCause(fs), 0u);
  // Only stopped ones: the earliest of them.
  fs[0].timestamp = 10;
  for (auto& f : fs) f.stopped = true;
  EXPECT_EQ(RootCause(fs), 2u);
}

// Two agents' files dated the same second: the one whose worker wrote first
// is the root cause (a peer's "connection closed" follows the exception that
// closed the connection), whatever order the agents ended in.
TEST(FailureTest, WithinASecondTheFileWrittenFirstComesFirst) {
  std::vector<FailureKey> fs = {
      {.timestamp = 10, .has_error_file = true, .rank = 0, .written_ns = 10'700'000'000},
      {.timestamp = 10, .has_error_file = true, .rank = 1, .written_ns = 10'200'000'000}};
  EXPECT_EQ(RootCause(fs), 1u);
  // The second still decides before the nanoseconds do.
  fs[0].timestamp = 9;
  EXPECT_EQ(RootCause(fs), 0u);
}

// The agent's copy keeps the worker's file's modification time, and
// ReadErrorFile reports it: the rule can then order agents' files.
TEST(FailureTest, AgentErrorFileKeepsTheWorkersTime) {
  std::string worker = TempPath("wt.json"), agent = TempPath("at.json");
  std::ofstream(worker) << R"({"message": {"message": "E", "extraInfo": {"timestamp": "1"}}})";
  const timespec then[2] = {{.tv_sec = 1'000, .tv_nsec = 0}, {.tv_sec = 1'000, .tv_nsec = 250}};
  ASSERT_EQ(::utimensat(AT_FDCWD, worker.c_str(), then, 0), 0);
  auto f = DescribeFailure(0, 0, 1, 1, worker, 0);
  EXPECT_EQ(f.written_ns, 1'000'000'000'250);
  ASSERT_TRUE(WriteAgentErrorFile(agent, f).ok());
  auto copy = ReadErrorFile(agent);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->written_ns, 1'000'000'000'250);
  // A record built by the agent (no worker file) is dated when the exit
  // was seen (DescribeFailure), not when it is written.
  auto sig = DescribeFailure(0, 0, 9, -9, "", 0);
  EXPECT_GT(sig.written_ns, 1'000'000'000'250);
  ASSERT_TRUE(WriteAgentErrorFile(agent, sig).ok());
  EXPECT_EQ(ReadErrorFile(agent)->written_ns, sig.written_ns);
  std::remove(worker.c_str());
  std::remove(agent.c_str());
}

// A file that a rename cannot replace (Kubernetes' /dev/termination-log is
// mounted into the container) is written in place; here the rename's
// temporary name is taken by a directory.
TEST(FailureTest, AgentErrorFileWrittenInPlaceWhenARenameCannotReplaceIt) {
  std::string agent = TempPath("termination-log");
  std::ofstream(agent) << "old, longer than what replaces it";
  ASSERT_EQ(::mkdir((agent + ".tmp").c_str(), 0755), 0);
  auto f = DescribeFailure(0, 0, 9, -9, "", 0);
  ASSERT_TRUE(WriteAgentErrorFile(agent, f).ok());
  auto j = nlohmann::json::parse(std::ifstream(agent));
  EXPECT_EQ(j["message"]["errorCode"], -9);
  ::rmdir((agent + ".tmp").c_str());
  std::remove(agent.c_str());
}

// An unknown time sorts after a known one, whatever the ranks.
TEST(FailureTest, AnUnknownFileTimeComesAfterAKnownOne) {
  std::vector<FailureKey> fs = {
      {.timestamp = 10, .has_error_file = true, .rank = 0, .written_ns = 0},
      {.timestamp = 10, .has_error_file = true, .rank = 1, .written_ns = 10'500'000'000}};
  EXPECT_EQ(RootCause(fs), 1u);
  fs[1].written_ns = 0;
  EXPECT_EQ(RootCause(fs), 0u);
}

TEST(FailureTest, ReadErrorFileTellsMissingFromTorn) {
  EXPECT_EQ(ReadErrorFile("/nonexistent/error.json").status().code(), StatusCode::kNotFound);
  std::string path = TempPath("torn2.json");
  std::ofstream(path) << "{";
  auto f = ReadErrorFile(path);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  std::remove(path.c_str());
}

TEST(FailureTest, TableMatchesTorchrunsLayout) {
  auto f = DescribeFailure(1, 1, 123, 3, "", 0);
  std::string t = FormatFailureTable("train.py", {f}, "host1");
  EXPECT_EQ(t.rfind("\n====", 0), 0u);
  EXPECT_NE(t.find("\ntrain.py FAILED\n----"), std::string::npos);
  EXPECT_NE(t.find("Failures:\n  <NO_OTHER_FAILURES>\n"), std::string::npos);
  EXPECT_NE(t.find("Root Cause (first observed failure):\n[0]:\n  time      : "),
            std::string::npos);
  EXPECT_NE(t.find("  host      : host1\n  rank      : 1 (local_rank: 1)\n"
                   "  exitcode  : 3 (pid: 123) \n  error_file: <N/A>\n  traceback : To enable"),
            std::string::npos);
  // torchrun 2.x lists the siblings stopped after the failure, a signal's
  // name after their exit code.
  auto sibling = DescribeFailure(0, 0, 122, -15, "", 1);
  sibling.stopped = true;
  t = FormatFailureTable("train.py", {f, sibling}, "host1");
  EXPECT_NE(t.find("Failures:\n[1]:\n  time      : "), std::string::npos);
  EXPECT_NE(t.find("  exitcode  : -15 (pid: 122)  (SIGTERM)\n  error_file: <N/A>\n"
                   "  traceback : Signal 15 (SIGTERM) received by PID 122\n"),
            std::string::npos);
  EXPECT_NE(t.find("Root Cause (first observed failure):\n[0]:\n"), std::string::npos);
  // Border width is the widest line, capped at 60.
  EXPECT_NE(t.find("\n" + std::string(60, '=') + "\n"), std::string::npos);
}

TEST(FailureTest, TheReportCarriesEveryFailureAndTheRootCause) {
  std::string worker = TempPath("rw.json");
  std::ofstream(worker) << R"({"message": {"message": "E", "extraInfo": {"timestamp": "5"}}})";
  auto stopped = DescribeFailure(0, 4, 122, -15, "", 5);
  stopped.stopped = true;
  auto raised = DescribeFailure(1, 5, 123, 1, worker, 9);
  AttemptFailures failures;
  failures.Add(stopped);
  failures.Add(raised);
  auto j = nlohmann::json::parse(FailureReportJson("train.py", failures, "h1", 2));
  EXPECT_EQ(j["name"], "train.py");
  EXPECT_EQ(j["host"], "h1");
  EXPECT_EQ(j["restarts"], 2);
  EXPECT_EQ(j["root_cause"], 1);  // a stopped sibling is never the root cause
  const auto& root = j["failures"][1];
  EXPECT_EQ(root["rank"], 5);
  EXPECT_EQ(root["local_rank"], 1);
  EXPECT_EQ(root["exitcode"], 1);
  EXPECT_TRUE(root["signal"].is_null());
  EXPECT_EQ(root["error_file"], worker);
  EXPECT_EQ(root["time"], 5);
  EXPECT_EQ(root["host"], "h1");
  EXPECT_EQ(j["failures"][0]["signal"], "SIGTERM");
  EXPECT_TRUE(j["failures"][0]["error_file"].is_null());
  EXPECT_TRUE(j["failures"][0]["stopped"]);
  std::string path = TempPath("report.json");
  ASSERT_TRUE(WriteFailureReport(path, j.dump()).ok());
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(path)), j);
  EXPECT_FALSE(WriteFailureReport("/nonexistent/dir/report.json", j.dump()).ok());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(WriteFailureReport("-", "{}").ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), std::string(kFailureReportMark) + "{}\n");
  std::remove(path.c_str());
  std::remove(worker.c_str());
}

TEST(FailureTest, AgentErrorFileAddsErrorCode) {
  std::string worker = TempPath("w.json"), agent = TempPath("a.json");
  std::ofstream(worker) << R"({"message": {"message": "E", "extraInfo": {"timestamp": "1"}}})";
  auto f = DescribeFailure(0, 0, 1, 3, worker, 0);
  ASSERT_TRUE(WriteAgentErrorFile(agent, f).ok());
  auto j = nlohmann::json::parse(std::ifstream(agent));
  EXPECT_EQ(j["message"]["errorCode"], 3);
  EXPECT_EQ(j["message"]["message"], "E");
  auto sig = DescribeFailure(0, 0, 9, -9, "", 0);
  ASSERT_TRUE(WriteAgentErrorFile(agent, sig).ok());
  j = nlohmann::json::parse(std::ifstream(agent));
  EXPECT_EQ(j["message"]["errorCode"], -9);
  EXPECT_EQ(j["message"]["message"], "Signal 9 (SIGKILL) received by PID 9");
  std::remove(worker.c_str());
  std::remove(agent.c_str());
}

constexpr const char* kLibuvError =
    "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without "
    "libuv support, run with USE_LIBUV=0 to disable it.";

TEST(FailureTest, LibuvHintFromTheErrorFile) {
  std::string worker = TempPath("uv.json"), agent = TempPath("uva.json");
  nlohmann::json w = {
      {"message",
       {{"message", kLibuvError},
        {"extraInfo",
         {{"py_callstack", "Traceback\n" + std::string(kLibuvError)}, {"timestamp", "1"}}}}}};
  std::ofstream(worker) << w.dump();
  auto f = DescribeFailure(0, 0, 1, 1, worker, 0);
  EXPECT_NE(f.hint.find("USE_LIBUV=0"), std::string::npos);
  EXPECT_NE(f.hint.find("use_libuv=False"), std::string::npos);
  EXPECT_EQ(f.hint.find('\n'), std::string::npos);
  std::string table = FormatFailureTable("uv.py", {f}, "host");
  EXPECT_NE(table.find("\n  hint      : " + f.hint + "\n"), std::string::npos) << table;
  ASSERT_TRUE(WriteAgentErrorFile(agent, f).ok());
  auto j = nlohmann::json::parse(std::ifstream(agent));
  EXPECT_EQ(j["message"]["message"], std::string(kLibuvError) + "\nhint: " + f.hint);
  EXPECT_EQ(j["message"]["errorCode"], 1);
  std::remove(worker.c_str());
  std::remove(agent.c_str());
}

TEST(FailureTest, LibuvHintFromTheStderrTail) {
  std::string agent = TempPath("uvt.json");
  auto f = DescribeFailure(0, 0, 1, 1, "", 0, std::string("Traceback ...\n") + kLibuvError);
  ASSERT_FALSE(f.hint.empty());
  ASSERT_TRUE(WriteAgentErrorFile(agent, f).ok());
  auto j = nlohmann::json::parse(std::ifstream(agent));
  EXPECT_EQ(j["message"]["message"], f.message + "\nhint: " + f.hint);
  std::remove(agent.c_str());
  // Other failures get no hint and no extra row.
  auto plain = DescribeFailure(0, 0, 1, 1, "", 0, "ValueError: boom");
  EXPECT_EQ(plain.hint, "");
  EXPECT_EQ(FormatFailureTable("x.py", {plain}, "h").find("hint"), std::string::npos);
}

TEST(FailureTest, LastLinesOfEachStreamStdoutFirst) {
  WorkerFailure f;
  f.global_rank = 3;
  f.local_rank = 1;
  f.pid = 42;
  EXPECT_EQ(FormatLastLines(f, "a\nb\nc\n", "Traceback\nValueError: x\n", 2),
            "last lines of rank 3 (local_rank 1, pid 42):\n"
            "  stdout | b\n  stdout | c\n"
            "  stderr | Traceback\n  stderr | ValueError: x");
  // A partial last line counts; a progress bar shows its last state.
  EXPECT_EQ(FormatLastLines(f, "", "10%\r50%\r90%\nhalf", 5),
            "last lines of rank 3 (local_rank 1, pid 42):\n"
            "  stderr | 90%\n  stderr | half");
  // Blank lines are lines; nothing seen, or 0 asked for, is no report.
  EXPECT_EQ(FormatLastLines(f, "x\n\n", "", 2),
            "last lines of rank 3 (local_rank 1, pid 42):\n  stdout | x\n  stdout | ");
  EXPECT_EQ(FormatLastLines(f, "", "", 20), "");
  EXPECT_EQ(FormatLastLines(f, "a\n", "b\n", 0), "");
}

}  // namespace
}  // namespace trun::failure
