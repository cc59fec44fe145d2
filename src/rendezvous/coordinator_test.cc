#include "rendezvous/coordinator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace trun::rendezvous {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// The store as the coordinator sees it: its writes come back to it as
// observed changes, as StoreServer::Observe delivers them.
class Harness {
 public:
  explicit Harness(CoordinatorOptions o) : coord_(std::move(o), now_) {}

  void Put(uint64_t conn, const std::string& key, const std::string& value) {
    data_[key] = value;
    coord_.OnKey(conn, key, value, now_);
    Flush();
  }
  void Join(int64_t seq, const std::string& id, json extra = json::object()) {
    json info = {{"id", id}, {"addr", "10.0.0." + std::to_string(seq)}, {"nproc", 2}};
    info.update(extra);
    Put(100 + static_cast<uint64_t>(seq), "node/" + std::to_string(seq), info.dump());
  }
  void Ready(int64_t seq, int k) {
    Put(100 + static_cast<uint64_t>(seq), "ready/" + std::to_string(seq), std::to_string(k));
  }
  void Heartbeat(int64_t seq) {
    Put(100 + static_cast<uint64_t>(seq), "hb/" + std::to_string(seq), "1");
  }
  void Advance(std::chrono::milliseconds d) {
    now_ += d;
    auto next = coord_.NextDeadline();
    if (next && *next <= now_) {
      coord_.OnTimer(now_);
      Flush();
    }
  }
  void Disconnect(int64_t seq) {
    coord_.OnDisconnect(100 + static_cast<uint64_t>(seq), now_);
    Flush();
  }
  std::optional<std::string> Get(const std::string& key) const {
    auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  // assign/<s>/<k>'s answer, when it says there is no round.
  std::optional<NoRound> NoRoundAt(const std::string& key) const {
    auto v = Get(key);
    if (!v) return std::nullopt;
    auto answer = DecodeAssignment(*v);
    if (!answer.ok() || !std::holds_alternative<NoRound>(*answer)) return std::nullopt;
    return std::get<NoRound>(*answer);
  }
  // assign/<s>/<k>'s answer, when it places the node in a round.
  std::optional<Placement> PlacementAt(const std::string& key) const {
    auto v = Get(key);
    if (!v) return std::nullopt;
    auto answer = DecodeAssignment(*v);
    if (!answer.ok() || !std::holds_alternative<Placement>(*answer)) return std::nullopt;
    return std::get<Placement>(*answer);
  }
  std::vector<std::string> RoundIds(int64_t r) const {
    std::vector<std::string> ids;
    auto v = Get("round/" + std::to_string(r));
    if (!v) return ids;
    auto doc = DecodeRound(*v);
    for (const auto& n : doc->nodes) ids.push_back(n.id);
    return ids;
  }
  Coordinator& coord() { return coord_; }
  Clock::time_point now() const { return now_; }
  // The last round write's Write::seen_from.
  const std::vector<std::string>& seen_from() const { return seen_from_; }
  // Makes the coordinator's writes, as the store would.
  void Flush() {
    for (auto& w : coord_.TakeWrites()) {
      if (w.key.starts_with("round/")) seen_from_ = w.seen_from;
      if (w.if_absent && data_.count(w.key)) continue;
      Put(0, w.key, w.value);
    }
  }

 private:
  Clock::time_point now_{};
  std::map<std::string, std::string> data_;
  std::vector<std::string> seen_from_;
  Coordinator coord_;
};

CoordinatorOptions Elastic(int min, int max) {
  CoordinatorOptions o;
  o.run_id = "job";
  o.min_nodes = min;
  o.max_nodes = max;
  o.last_call_timeout = 1000ms;
  o.join_timeout = 10'000ms;
  o.close_timeout = 3000ms;
  o.heartbeat_timeout = 2000ms;
  o.store_addr = "store";
  o.store_port = 29400;
  return o;
}

TEST(CoordinatorTest, TheFirstRoundClosesAtMaxAtOnce) {
  Harness h(Elastic(2, 2));
  h.Join(1, "a");
  h.Ready(1, 1);
  EXPECT_FALSE(h.Get("round/0"));
  h.Join(2, "b");
  h.Ready(2, 1);
  EXPECT_EQ(h.RoundIds(0), (std::vector<std::string>{"a", "b"}));
  for (int g : {0, 1}) {
    auto place = h.PlacementAt(fmt::format("assign/{}/1", g + 1));
    ASSERT_TRUE(place) << h.Get(fmt::format("assign/{}/1", g + 1)).value_or("(none)");
    EXPECT_EQ(place->round, 0);
    EXPECT_EQ(place->group_rank, g);
    EXPECT_EQ(place->nodes, 2);
    EXPECT_EQ(place->world_size, 4);
    EXPECT_EQ(place->rank_offset, 2 * g);
    EXPECT_EQ(place->store_addr, "store");
    EXPECT_EQ(place->store_port, 29400);
    EXPECT_EQ(place->host_rank, -1);  // the host ("") takes no part
  }
  auto round = DecodeRound(*h.Get("round/0"));
  ASSERT_TRUE(round.ok()) << round.status().message();
  EXPECT_EQ(round->store_addr, "store");
  EXPECT_EQ(round->store_port, 29400);
  EXPECT_EQ(round->nodes[1].addr, "10.0.0.2");
  EXPECT_EQ(round->nodes[1].nproc, 2);
}

// Issue 25: the store serves a round's hosts by where their joins came from
// (peer_of, the store's view), never by the address each names.
TEST(CoordinatorTest, ARoundSaysWhereItsJoinsCameFrom) {
  auto o = Elastic(2, 2);
  o.peer_of = [](uint64_t conn) { return fmt::format("192.0.2.{}", conn - 100); };
  Harness h(o);
  h.Join(2, "b");
  h.Ready(2, 1);
  h.Join(1, "a", {{"addr", "10.9.9.9"}});
  h.Ready(1, 1);
  EXPECT_EQ(h.RoundIds(0), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(h.seen_from(), (std::vector<std::string>{"192.0.2.1", "192.0.2.2"}));
  // The round still tells the nodes what each named.
  EXPECT_EQ(DecodeRound(*h.Get("round/0"))->nodes[0].addr, "10.9.9.9");
  // Without peer_of (etcd), there is nothing to say.
  Harness e(Elastic(1, 1));
  e.Join(1, "a");
  e.Ready(1, 1);
  EXPECT_EQ(e.RoundIds(0), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(e.seen_from().empty());
}

// Issue 30: each node's health port goes into the round, for the others'
// GET /stacks?scope=job; one that cannot be a port is none.
TEST(CoordinatorTest, ARoundCarriesEachNodesHealthPort) {
  Harness h(Elastic(3, 3));
  h.Join(1, "a", {{"health_port", 8081}});
  h.Join(2, "b");
  h.Join(3, "c", {{"health_port", 70000}});
  for (int s = 1; s <= 3; ++s) h.Ready(s, 1);
  auto round = DecodeRound(*h.Get("round/0"));
  ASSERT_TRUE(round.ok()) << round.status().message();
  ASSERT_EQ(round->nodes.size(), 3u);
  EXPECT_EQ(round->nodes[0].health_port, 8081);
  EXPECT_EQ(round->nodes[1].health_port, 0);
  EXPECT_EQ(round->nodes[2].health_port, 0);
}

TEST(CoordinatorTest, AboveMinTheFirstRoundWaitsForTheLastCall) {
  Harness h(Elastic(1, 3));
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Advance(500ms);
  h.Join(2, "b");
  h.Ready(2, 1);
  EXPECT_FALSE(h.Get("round/0"));
  h.Advance(600ms);  // 1.1 s since min was reached
  EXPECT_EQ(h.RoundIds(0), (std::vector<std::string>{"a", "b"}));
}

TEST(CoordinatorTest, StaticOrdersByNodeRankAndNamesTheMissingOnTimeout) {
  auto o = Elastic(3, 3);
  o.by_node_rank = true;
  Harness h(o);
  h.Join(1, "x", {{"node_rank", 2}});
  h.Ready(1, 1);
  h.Join(2, "y", {{"node_rank", 0}});
  h.Ready(2, 1);
  for (int i = 0; i < 6; ++i) {
    h.Heartbeat(1);
    h.Heartbeat(2);
    h.Advance(1900ms);
  }
  auto answer = h.Get("assign/1/1");
  ASSERT_TRUE(answer);
  EXPECT_NE(answer->find("never arrived: node rank 1"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("timed out"), std::string::npos) << *answer;
  auto none = h.NoRoundAt("assign/1/1");
  ASSERT_TRUE(none) << *answer;
  EXPECT_EQ(none->kind, NoRound::Kind::kTimedOut);
}

// In a large job the join timeout's message names a few nodes and counts
// the rest, present and missing alike: one readable line, not every id.
TEST(CoordinatorTest, TheJoinTimeoutNamesAFewOfManyNodesAndCountsTheRest) {
  auto o = Elastic(1'010, 1'010);
  o.by_node_rank = true;
  o.heartbeat_timeout = 0ms;  // liveness is not what this tests
  Harness h(o);
  for (int i = 0; i < 1'000; ++i) {
    h.Join(i + 1, fmt::format("n{}", i), {{"node_rank", i}, {"ready", 1}});
  }
  h.Advance(10'000ms);
  auto none = h.NoRoundAt("assign/1/1");
  ASSERT_TRUE(none) << h.Get("assign/1/1").value_or("(none)");
  EXPECT_EQ(none->kind, NoRound::Kind::kTimedOut);
  const std::string& m = none->why.message();
  EXPECT_NE(m.find("1000 of at least 1010 nodes ready (node rank 0 (n0), node rank 1 (n1), "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("node rank 7 (n7) and 992 more); never arrived: node rank 1000, node rank "
                   "1001, "),
            std::string::npos)
      << m;
  EXPECT_TRUE(m.ends_with("node rank 1007 and 2 more")) << m;
  EXPECT_LT(m.size(), 600u) << m;
}

// c10d: nodes lost from the last round are named, a few of them.
TEST(CoordinatorTest, TheJoinTimeoutNamesAFewOfManyLostNodes) {
  auto o = Elastic(12, 12);
  o.heartbeat_timeout = 0ms;
  Harness h(o);
  for (int i = 1; i <= 12; ++i) h.Join(i, fmt::format("n{}", i), {{"ready", 1}});
  ASSERT_TRUE(h.Get("round/0"));
  for (int i = 3; i <= 12; ++i) h.Disconnect(i);
  for (int i = 1; i <= 2; ++i) h.Ready(i, 2);
  h.Advance(10'000ms);
  auto none = h.NoRoundAt("assign/1/2");
  ASSERT_TRUE(none) << h.Get("assign/1/2").value_or("(none)");
  EXPECT_TRUE(none->why.message().ends_with(
      "2 of at least 12 nodes ready (n1, n2); never arrived: n3 (lost), n4 (lost), n5 (lost), n6 "
      "(lost), n7 (lost), n8 (lost), n9 (lost), n10 (lost) and 2 more"))
      << none->why.message();
}

TEST(CoordinatorTest, StaticRanksFollowNodeRankNotArrival) {
  auto o = Elastic(2, 2);
  o.by_node_rank = true;
  Harness h(o);
  h.Join(1, "late-rank-1", {{"node_rank", 1}});
  h.Ready(1, 1);
  h.Join(2, "rank-0", {{"node_rank", 0}});
  h.Ready(2, 1);
  EXPECT_EQ(h.RoundIds(0), (std::vector<std::string>{"rank-0", "late-rank-1"}));
}

TEST(CoordinatorTest, ALostNodeEndsTheRoundAndTheSurvivorsCarryOn) {
  Harness h(Elastic(1, 2));
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  ASSERT_TRUE(h.Get("round/0"));
  h.Disconnect(2);
  auto end = h.Get("end/0");
  ASSERT_TRUE(end);
  EXPECT_TRUE(end->starts_with("membership: lost b")) << *end;
  h.Ready(1, 2);
  // Every node still alive is back: no need to wait for anyone.
  EXPECT_EQ(h.RoundIds(1), (std::vector<std::string>{"a"}));
  EXPECT_EQ(h.coord().failures(), 0);  // a membership change is not a failure
}

void FormRoundOfTwo(Harness& h) {
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  h.Advance(1100ms);
}

TEST(CoordinatorTest, ARestartShortOfItsMinimumSetsNoDeadlineInThePast) {
  // A node of two lost, min 2: the survivor waits past the close timeout
  // for a node or the join timeout, its host's timer never due at once
  // (it fired again and again, a core's worth, until the join timeout).
  Harness h(Elastic(2, 2));
  FormRoundOfTwo(h);
  ASSERT_TRUE(h.Get("round/0"));
  h.Disconnect(2);
  h.Ready(1, 2);
  for (int i = 0; i < 5; ++i) {
    h.Heartbeat(1);
    h.Advance(1000ms);
    auto next = h.coord().NextDeadline();
    ASSERT_TRUE(next);
    EXPECT_GT(*next, h.now()) << "after " << (i + 1) << " s";
  }
  EXPECT_FALSE(h.Get("assign/1/2"));
  // A node back in time closes the round at once: the close timeout passed.
  h.Join(3, "c");
  h.Ready(3, 1);
  EXPECT_EQ(h.RoundIds(1), (std::vector<std::string>{"a", "c"}));
}

TEST(CoordinatorTest, AFirstRoundAtItsMinimumNearTheJoinTimeoutSetsNoDeadlineInThePast) {
  // The minimum reached half a second before the join timeout: the round
  // closes at the last call, after it, and the join timeout, past, is no
  // deadline meanwhile.
  auto o = Elastic(2, 3);
  o.heartbeat_timeout = 0ms;
  Harness h(o);
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Advance(9500ms);
  h.Join(2, "b");
  h.Ready(2, 1);
  h.Advance(600ms);
  auto next = h.coord().NextDeadline();
  ASSERT_TRUE(next);
  EXPECT_GT(*next, h.now());
  h.Advance(500ms);
  EXPECT_EQ(h.RoundIds(0), (std::vector<std::string>{"a", "b"}));
}

TEST(CoordinatorTest, SilenceForTheHeartbeatTimeoutIsALoss) {
  Harness h(Elastic(1, 2));
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  for (int i = 0; i < 3; ++i) {
    h.Heartbeat(1);
    h.Advance(1000ms);
  }
  auto end = h.Get("end/0");
  ASSERT_TRUE(end);
  EXPECT_NE(end->find("no heartbeat"), std::string::npos) << *end;
}

TEST(CoordinatorTest, TheBudgetIsSpentOncePerFailedRound) {
  auto o = Elastic(2, 2);
  o.max_restarts = 1;
  Harness h(o);
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  // Both nodes report a failure of the same round: one is counted, once
  // both are back.
  h.Put(101, "end/0", "failure: a: rank 0 exited with 1");
  h.Put(102, "end/0", "failure: b: rank 2 exited with 1");
  h.Ready(1, 2);
  EXPECT_EQ(h.coord().failures(), 0);
  h.Ready(2, 2);
  EXPECT_EQ(h.coord().failures(), 1);
  ASSERT_TRUE(h.Get("round/1"));
  EXPECT_EQ(DecodeRound(*h.Get("round/1"))->failures, 1);
  h.Put(102, "end/1", "failure: b: rank 3 exited with 1");
  h.Ready(1, 3);
  h.Ready(2, 3);
  auto none = h.NoRoundAt("assign/1/3");
  ASSERT_TRUE(none) << h.Get("assign/1/3").value_or("(none)");
  EXPECT_EQ(none->kind, NoRound::Kind::kBudgetSpent);
  EXPECT_TRUE(none->why.message().starts_with("the restart budget")) << none->why.message();
}

// Nodes a (1) and b (2) join and are ready; round 0 closes with both.
// etcd learns of a dead node when its lease expires, after its peers'
// workers have failed on their broken connections: the loss is what
// happened, and it spends nothing.
TEST(CoordinatorTest, AFailureFollowedByTheLossOfANodeIsAMembershipChange) {
  auto o = Elastic(1, 2);
  o.max_restarts = 0;
  Harness h(o);
  FormRoundOfTwo(h);
  ASSERT_TRUE(h.Get("round/0"));
  h.Put(101, "end/0", "failure: a: rank 0 exited with 1");
  h.Ready(1, 2);
  EXPECT_FALSE(h.Get("assign/1/2"));  // b is neither back nor known lost
  h.coord().OnNodeGone(2, "its etcd lease ended", Clock::time_point{} + 1100ms);
  h.Flush();
  EXPECT_EQ(h.coord().failures(), 0);
  EXPECT_EQ(h.RoundIds(1), (std::vector<std::string>{"a"}));
}

TEST(CoordinatorTest, AFailureIsJudgedAtTheCloseTimeoutIfANodeNeverComesBack) {
  auto o = Elastic(1, 2);
  o.max_restarts = 0;
  Harness h(o);
  FormRoundOfTwo(h);
  h.Put(101, "end/0", "failure: a: rank 0 exited with 1");
  h.Ready(1, 2);
  for (int i = 0; i < 4; ++i) {  // b heartbeats but never comes back
    h.Heartbeat(1);
    h.Heartbeat(2);
    h.Advance(1000ms);
  }
  auto none = h.NoRoundAt("assign/1/2");
  ASSERT_TRUE(none) << h.Get("assign/1/2").value_or("(none)");
  EXPECT_EQ(none->kind, NoRound::Kind::kBudgetSpent);
  EXPECT_TRUE(none->why.message().starts_with("the restart budget")) << none->why.message();
}

TEST(CoordinatorTest, ALateNodeRestartsTheRoundAndOneBeyondMaxStandsBy) {
  Harness h(Elastic(2, 3));
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  h.Advance(1100ms);
  ASSERT_EQ(h.RoundIds(0).size(), 2u);
  h.Join(3, "c");
  h.Ready(3, 1);
  ASSERT_TRUE(h.Get("end/0"));
  EXPECT_NE(h.Get("end/0")->find("c joined"), std::string::npos);
  h.Ready(1, 2);
  h.Ready(2, 2);
  EXPECT_EQ(h.RoundIds(1), (std::vector<std::string>{"a", "b", "c"}));
  h.Join(4, "d");
  h.Ready(4, 1);
  EXPECT_FALSE(h.Get("end/1"));  // full: d stands by
  h.Disconnect(2);
  h.Ready(1, 3);
  h.Ready(3, 2);
  EXPECT_EQ(h.RoundIds(2), (std::vector<std::string>{"a", "c", "d"}));
}

TEST(CoordinatorTest, TheRoundEndsDoneWhenEveryNodeIsDone) {
  Harness h(Elastic(2, 2));
  h.Join(1, "a");
  h.Ready(1, 1);
  h.Join(2, "b");
  h.Ready(2, 1);
  h.Put(101, "done/1", "0");
  EXPECT_FALSE(h.Get("end/0"));
  h.Put(102, "done/2", "0");
  EXPECT_EQ(h.Get("end/0"), "done");
  h.Join(3, "late");
  h.Ready(3, 1);
  auto none = h.NoRoundAt("assign/3/1");
  ASSERT_TRUE(none) << h.Get("assign/3/1").value_or("(none)");
  EXPECT_EQ(none->kind, NoRound::Kind::kOther);
  EXPECT_EQ(none->why.message(), "job 'job' has already finished");
}

// a's workers succeed, then b's fail: a's agent exits with success and
// never comes back, so the failure is judged without waiting for it and its
// leaving is no loss; where the rest are fewer than min_nodes the job ends
// at once, restarts left or not, rather than at the join timeout.
TEST(CoordinatorTest, AFailureAfterANodeFinishedEndsTheJobWhenTooFewAreLeft) {
  for (int restarts : {0, 2}) {
    auto o = Elastic(2, 2);
    o.max_restarts = restarts;
    Harness h(o);
    FormRoundOfTwo(h);
    h.Put(101, "done/1", "0");
    h.Put(102, "end/0", "failure: b: rank 2 exited with 3");
    EXPECT_TRUE(h.coord().judging());
    h.Put(101, "left/1", "1");  // a's agent exits
    EXPECT_TRUE(h.coord().judging());
    h.Ready(2, 2);
    EXPECT_FALSE(h.coord().judging());
    EXPECT_TRUE(h.coord().over());
    EXPECT_EQ(h.coord().failures(), 1);
    auto none = h.NoRoundAt("assign/2/2");
    ASSERT_TRUE(none) << h.Get("assign/2/2").value_or("(none)");
    if (restarts == 0) {
      EXPECT_EQ(none->kind, NoRound::Kind::kBudgetSpent);
    } else {
      EXPECT_EQ(none->kind, NoRound::Kind::kOther);
      EXPECT_TRUE(none->why.message().starts_with("round 0 failed after a had finished"))
          << none->why.message();
    }
  }
}

// Above min_nodes the survivors carry on without the finished node, and the
// failure spends a restart.
TEST(CoordinatorTest, AFailureAfterANodeFinishedRestartsTheRestAboveMin) {
  auto o = Elastic(1, 2);
  o.max_restarts = 1;
  Harness h(o);
  FormRoundOfTwo(h);
  h.Put(101, "done/1", "0");
  h.Put(102, "end/0", "failure: b: rank 2 exited with 3");
  h.Ready(2, 2);
  EXPECT_FALSE(h.coord().judging());
  EXPECT_FALSE(h.coord().over());
  EXPECT_EQ(h.coord().failures(), 1);
  h.Put(101, "left/1", "1");
  EXPECT_EQ(h.RoundIds(1), (std::vector<std::string>{"b"}));
}

// Round 4 had a (group rank 0), b (1) and the host (2); the host is lost.
json Survivor(int rank) {
  return {{"round", 4},      {"failures", 2},       {"prev_rank", rank},
          {"prev_nodes", 3}, {"prev_host_rank", 2}, {"ready", 1}};
}

TEST(CoordinatorTest, AfterATakeoverRoundsAndSpentRestartsGoOn) {
  Harness h(Elastic(1, 3));
  h.Join(1, "b", Survivor(1));
  EXPECT_FALSE(h.Get("round/5"));  // a, from the last round, is expected
  h.Join(2, "a", Survivor(0));
  ASSERT_TRUE(h.Get("round/5"));
  EXPECT_EQ(DecodeRound(*h.Get("round/5"))->failures, 2);
  EXPECT_EQ(h.RoundIds(5), (std::vector<std::string>{"b", "a"}));
}

TEST(CoordinatorTest, AfterATakeoverTheMissingAreNamedByTheirLastGroupRank) {
  CoordinatorOptions o = Elastic(2, 3);
  o.join_timeout = 2000ms;
  o.close_timeout = 5000ms;
  Harness h(o);
  h.Join(1, "b", Survivor(1));
  h.Advance(1000ms);
  h.Heartbeat(1);
  h.Advance(1000ms);
  auto none = h.NoRoundAt("assign/1/1");
  ASSERT_TRUE(none) << h.Get("assign/1/1").value_or("(none)");
  EXPECT_EQ(none->kind, NoRound::Kind::kTimedOut);
  EXPECT_NE(none->why.message().find("never arrived: group rank 0 of round 4"), std::string::npos)
      << none->why.message();
}

// A join that says "ready": 1 is its first request for a round as well.
TEST(CoordinatorTest, AJoinMayBeTheFirstReady) {
  CoordinatorOptions o = Elastic(2, 2);
  o.store_addr = "";  // as under etcd: group rank 0's agent hosts the workers' store
  o.host_id = "b";
  Harness h(o);
  h.Join(1, "a", {{"ready", 1}, {"store_port", 29501}});
  EXPECT_FALSE(h.Get("round/0"));
  h.Join(2, "b", {{"ready", 1}, {"store_port", 29502}});
  auto place = h.PlacementAt("assign/2/1");
  ASSERT_TRUE(place) << h.Get("assign/2/1").value_or("(none)");
  EXPECT_EQ(place->group_rank, 1);
  EXPECT_EQ(place->host, "b");
  EXPECT_EQ(place->host_rank, 1);
  EXPECT_EQ(place->store_addr, "10.0.0.1");
  EXPECT_EQ(place->store_port, 29501);
  // Its next request is a "ready" as before.
  h.Put(0, "end/0", "membership: c joined");
  h.Ready(1, 2);
  h.Ready(2, 2);
  ASSERT_TRUE(h.PlacementAt("assign/1/2"));
  EXPECT_EQ(h.PlacementAt("assign/1/2")->round, 1);
}

TEST(CoordinatorTest, RoundsRoundTripAndMalformedOnesAreNamed) {
  RoundDoc doc{7, 2, "", 0, "h", {{"a_1", "10.0.0.1", 8, 29401, 8080}, {"b_2", "::1", 1, 0, 0}}};
  auto back = DecodeRound(EncodeRound(doc));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->round, 7);
  EXPECT_EQ(back->failures, 2);
  EXPECT_EQ(back->host, "h");
  ASSERT_EQ(back->nodes.size(), 2u);
  EXPECT_EQ(back->nodes[0].store_port, 29401);
  EXPECT_EQ(back->nodes[0].health_port, 8080);
  EXPECT_EQ(back->nodes[1].addr, "::1");
  for (std::string_view bad :
       {"", "[]", "{}", "{}\na 1.2.3.4 x 0 0", "{}\na b 1 2", "{}\na b 1 2 x", "{}\na b 1 2 3 4"}) {
    EXPECT_FALSE(DecodeRound(bad).ok()) << bad;
  }
}

// assign/'s grammar (coordinator.h), byte for byte: a placement, or
// "error:" kind ":" message with the message whole, colons and all.
TEST(CoordinatorTest, AssignmentsHaveAGrammarAndMalformedOnesAreNamed) {
  Placement p{12, 1, 3, 24, 8, 2, "store", 29400, "h", 0};
  const std::string text = EncodeAssignment(p);
  EXPECT_EQ(json::parse(text),
            json::parse(R"({"round": 12, "group_rank": 1, "nodes": 3, "world_size": 24,
                            "rank_offset": 8, "failures": 2, "store_addr": "store",
                            "store_port": 29400, "host": "h", "host_rank": 0})"));
  EXPECT_EQ(EncodeAssignment(NoRound{NoRound::Kind::kBudgetSpent, Status::Internal("a: b")}),
            "error:budget_spent:a: b");
  EXPECT_EQ(EncodeAssignment(NoRound{NoRound::Kind::kTimedOut, Status::Timeout("t")}),
            "error:timed_out:t");
  EXPECT_EQ(EncodeAssignment(NoRound{NoRound::Kind::kOther, Status::Internal("")}), "error:other:");

  auto round = DecodeAssignment(text);
  ASSERT_TRUE(round.ok()) << round.status().message();
  const auto& back = std::get<Placement>(*round);
  EXPECT_EQ(back.round, 12);
  EXPECT_EQ(back.group_rank, 1);
  EXPECT_EQ(back.nodes, 3);
  EXPECT_EQ(back.world_size, 24);
  EXPECT_EQ(back.rank_offset, 8);
  EXPECT_EQ(back.failures, 2);
  EXPECT_EQ(back.store_addr, "store");
  EXPECT_EQ(back.store_port, 29400);
  EXPECT_EQ(back.host, "h");
  EXPECT_EQ(back.host_rank, 0);
  auto spent = DecodeAssignment("error:budget_spent:the restart budget: spent");
  ASSERT_TRUE(spent.ok()) << spent.status().message();
  const auto& none = std::get<NoRound>(*spent);
  EXPECT_EQ(none.kind, NoRound::Kind::kBudgetSpent);
  EXPECT_EQ(none.why.message(), "the restart budget: spent");
  EXPECT_EQ(none.why.code(), StatusCode::kInternal);
  EXPECT_EQ(std::get<NoRound>(*DecodeAssignment("error:timed_out:x")).kind,
            NoRound::Kind::kTimedOut);

  // The words of a message never make a kind: an untyped error (an older
  // coordinator's) or an unknown kind is malformed, and says so.
  json missing = json::parse(text);
  missing.erase("rank_offset");
  json outside = json::parse(text);
  outside["group_rank"] = 3;  // of 3 nodes
  json typed = json::parse(text);
  typed["store_port"] = "29400";
  for (std::string bad :
       {std::string(""), std::string("12"), std::string("{"), missing.dump(), outside.dump(),
        typed.dump(), std::string("error:"), std::string("error:timed out after 5 s"),
        std::string("error:budget_spent"), std::string("error:nope:x"),
        std::string("Error:other:x")}) {
    auto got = DecodeAssignment(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_NE(got.status().message().find("malformed answer"), std::string::npos)
        << got.status().message();
  }
}

TEST(CoordinatorTest, MalformedJoinsAreIgnored) {
  Harness h(Elastic(1, 1));
  h.Put(7, "node/1", "not json");
  h.Put(7, "node/2", R"({"id": 5})");
  h.Put(7, "node/3", R"({"id": "has space", "nproc": 1})");
  h.Put(7, "ready/1", "1");
  h.Put(7, "node/x", "{}");
  EXPECT_EQ(h.coord().live_nodes(), 0u);
  EXPECT_FALSE(h.Get("round/0"));
}

}  // namespace
}  // namespace trun::rendezvous
