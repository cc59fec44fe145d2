#include "agent/telemetry.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trun::agent {
namespace {

using json = nlohmann::json;

TEST(HealthTest, EncodesTheGroup) {
  GroupHealth h;
  h.state = "HEALTHY";
  h.round = 3;
  h.node_rank = 1;
  h.restarts = 2;
  h.attempts = 3;
  h.workers = {{0, 4, 100, "running", std::nullopt}, {1, 5, 101, "failed", -9}};
  TelemetryOptions o;
  o.run_id = "job";
  o.hostname = "node1";
  o.max_restarts = 5;
  EXPECT_TRUE(IsHealthy(h));
  auto j = json::parse(EncodeHealth(h, o));
  EXPECT_EQ(j["status"], "healthy");
  EXPECT_EQ(j["state"], "HEALTHY");
  EXPECT_EQ(j["run_id"], "job");
  EXPECT_EQ(j["round"], 3);
  EXPECT_EQ(j["node_rank"], 1);
  EXPECT_EQ(j["restarts"], 2);
  EXPECT_EQ(j["max_restarts"], 5);
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][0], json::parse(R"({"local_rank":0,"rank":4,"pid":100,)"
                                         R"("state":"running","exitcode":null,"restarts":2})"));
  EXPECT_EQ(j["workers"][1]["exitcode"], -9);

  GroupHealth init;
  EXPECT_FALSE(IsHealthy(init));
  auto k = json::parse(EncodeHealth(init, o));
  EXPECT_EQ(k["status"], "unhealthy");
  EXPECT_TRUE(k["round"].is_null());
  EXPECT_TRUE(k["workers"].empty());
  for (const char* s : {"UNHEALTHY", "STOPPED", "FAILED"}) {
    init.state = s;
    EXPECT_FALSE(IsHealthy(init)) << s;
  }
  init.state = "SUCCEEDED";
  EXPECT_TRUE(IsHealthy(init));
}

rendezvous::Round MakeRound(int64_t number, std::vector<std::string> ids, int64_t failures) {
  rendezvous::Round r;
  r.number = number;
  r.failures = failures;
  for (auto& id : ids) r.participants.push_back({id, "10.0.0.1", 2});
  r.nodes = static_cast<int>(ids.size());
  r.world_size = 2 * r.nodes;
  r.store_addr = "10.0.0.1";
  r.store_port = 29500;
  return r;
}

// A test's event file (unique per test and process), gone afterwards.
struct EventFile {
  explicit EventFile(const std::string& test)
      : path(std::filesystem::temp_directory_path() /
             (test + "_" + std::to_string(getpid()) + ".jsonl")) {
    std::filesystem::remove(path);
  }
  ~EventFile() { std::filesystem::remove(path); }
  // A job "job" writing its events here.
  TelemetryOptions Options() const {
    TelemetryOptions o;
    o.event_file = path.string();
    o.run_id = "job";
    return o;
  }
  // Every event written, and their names in order.
  std::vector<json> Read(std::vector<std::string>& names) const {
    std::ifstream in(path);
    std::vector<json> events;
    for (std::string line; std::getline(in, line);) events.push_back(json::parse(line));
    for (const auto& e : events) names.push_back(e["name"]);
    return events;
  }
  std::filesystem::path path;
};

TEST(TelemetryTest, WritesEachTransitionAndCountsIt) {
  EventFile file("telemetry_test");
  asio::io_context io;
  Telemetry t;
  auto o = file.Options();
  o.role = "trainer";
  o.hostname = "node1";
  o.max_restarts = 3;
  ASSERT_TRUE(t.Start(io, o, [] { return GroupHealth{}; }).ok());
  EXPECT_EQ(t.health_port(), 0);

  t.AgentStarted("");
  t.RendezvousStarted();
  t.RendezvousCompleted(MakeRound(0, {"a", "b"}, 0));
  t.WorkerStarted(0, 2, 100);
  t.WorkerExited(0, 2, 100, -9, false, FailureCause::kWatchdog);
  t.GroupStopping("failure", "rank 2 exited with -9", SIGTERM);
  t.RendezvousStarted();
  t.RendezvousCompleted(MakeRound(1, {"b", "c"}, 1));
  t.Restarting("failure", "rank 2 exited with -9");
  t.RendezvousFailed({rendezvous::NoRound::Kind::kTimedOut,
                      Status::Internal("rendezvous 'job' timed out after 600 s (join_timeout)")});
  t.Shutdown(143);

  std::vector<std::string> names;
  auto events = file.Read(names);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "trun.agent.started", "trun.rendezvous.started", "trun.rendezvous.completed",
                "trun.worker.started", "trun.worker.exited", "trun.group.stopping",
                "trun.rendezvous.started", "trun.rendezvous.completed", "trun.membership.changed",
                "trun.group.restarting", "trun.rendezvous.timed_out", "trun.agent.shutdown"}));
  for (const auto& e : events) {
    EXPECT_EQ(e["source"], "AGENT");
    EXPECT_GT(e["timestamp"].get<int64_t>(), 0);
    EXPECT_EQ(e["metadata"]["run_id"], "job");
    EXPECT_EQ(e["metadata"]["role"], "trainer");
    EXPECT_EQ(e["metadata"]["agent_pid"], getpid());
  }
  EXPECT_TRUE(events[0]["metadata"]["round"].is_null());
  const auto& exited = events[4]["metadata"];
  EXPECT_EQ(exited["signal"], "SIGKILL");
  EXPECT_EQ(exited["outcome"], "failed");
  EXPECT_EQ(exited["cause"], "watchdog");
  EXPECT_EQ(exited["round"], 0);
  const auto& membership = events[8]["metadata"];
  EXPECT_EQ(membership["joined"], json::array({"c"}));
  EXPECT_EQ(membership["left"], json::array({"a"}));
  EXPECT_EQ(events[9]["metadata"]["restarts"], 1);
  EXPECT_EQ(events[11]["metadata"]["outcome"], "signal");
  EXPECT_EQ(events[11]["metadata"]["signal"], "SIGTERM");
}

// Group rank 0 reads every round's list whole, but a large round's events
// leave the ids out (docs/events.md): one line may not grow with the job.
TEST(TelemetryTest, LargeRoundsEventsLeaveOutTheIds) {
  EventFile file("telemetry_large");
  asio::io_context io;
  Telemetry t;
  auto o = file.Options();
  ASSERT_TRUE(t.Start(io, o, [] { return GroupHealth{}; }).ok());
  std::vector<std::string> ids, others;
  for (int i = 0; i <= rendezvous::kListedNodes; ++i) {
    ids.push_back(fmt::format("node{}", i));
    others.push_back(fmt::format("other{}", i));
  }
  t.RendezvousCompleted(MakeRound(0, ids, 0));
  t.RendezvousCompleted(MakeRound(1, others, 0));
  t.Shutdown(0);

  std::vector<std::string> names;
  auto events = file.Read(names);
  // No trun.membership.changed with every id joined and left.
  EXPECT_EQ(names, (std::vector<std::string>{"trun.rendezvous.completed",
                                             "trun.rendezvous.completed", "trun.agent.shutdown"}));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(events[i]["metadata"]["nodes"], rendezvous::kListedNodes + 1);
    EXPECT_FALSE(events[i]["metadata"].contains("participants")) << events[i].dump();
  }
}

}  // namespace
}  // namespace trun::agent
