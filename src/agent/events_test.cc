#include "agent/events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace trun::agent {
namespace {

TEST(EventsTest, EncodesTorchsEnvelopeOnOneLine) {
  nlohmann::ordered_json md;
  md["run_id"] = "job";
  md["round"] = 2;
  md["signal"] = nullptr;
  EXPECT_EQ(EncodeEvent("trun.worker.exited", 1700000000123, md),
            R"({"name":"trun.worker.exited","source":"AGENT","timestamp":1700000000123,)"
            R"("metadata":{"run_id":"job","round":2,"signal":null}})");
}

TEST(EventsTest, EscapesNewlinesAndReplacesInvalidUtf8) {
  nlohmann::ordered_json md;
  md["reason"] = std::string("line one\nline \"two\"\xff");
  std::string line = EncodeEvent("x", 0, md);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto back = nlohmann::json::parse(line);
  EXPECT_EQ(back["metadata"]["reason"], "line one\nline \"two\"\xef\xbf\xbd");
}

TEST(EventsTest, SinkAppendsWholeLines) {
  auto dir = std::filesystem::temp_directory_path() / ("events_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "events.jsonl").string();
  {
    std::ofstream(path) << "earlier\n";
    auto sink = EventSink::Open(false, path);
    ASSERT_TRUE(sink.ok()) << sink.status().ToString();
    EXPECT_TRUE(sink->enabled());
    sink->Write("{\"a\":1}");
    EventSink moved = std::move(*sink);
    moved.Write("{\"b\":2}");
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "earlier\n{\"a\":1}\n{\"b\":2}\n");
  std::filesystem::remove_all(dir);
}

TEST(EventsTest, UnwritablePathIsAUsageError) {
  auto sink = EventSink::Open(false, "/nonexistent-dir/events.jsonl");
  ASSERT_FALSE(sink.ok());
  EXPECT_EQ(sink.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sink.status().message().find("/nonexistent-dir/events.jsonl"), std::string::npos);
}

TEST(EventsTest, NullSinkWritesNothing) {
  auto sink = EventSink::Open(false, "");
  ASSERT_TRUE(sink.ok());
  EXPECT_FALSE(sink->enabled());
  sink->Write("ignored");
}

}  // namespace
}  // namespace trun::agent
