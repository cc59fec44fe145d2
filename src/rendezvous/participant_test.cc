#include "rendezvous/participant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "rendezvous/fake_medium.h"

namespace trun::rendezvous {
namespace {

using fake::FakeMedium;
using fake::FakeWorld;
using std::chrono::seconds;

// What the agent's loop heard from one node's rendezvous.
struct Agent {
  std::string id;
  std::unique_ptr<Rendezvous> rdzv;
  std::vector<RoundOutcome> outcomes;
  std::vector<RoundEnd> ends;
  int done = 0;

  const Round* round() const {
    return outcomes.empty() ? nullptr : std::get_if<Round>(&outcomes.back());
  }
  const NoRound* no_round() const {
    return outcomes.empty() ? nullptr : std::get_if<NoRound>(&outcomes.back());
  }
};

// Several Participants and their coordinator in one process, over a
// FakeWorld. The test's thread is every agent's loop: it calls the
// rendezvous and runs its handlers (Pump). Virtual time moves only when a
// test says; the waits on real time are for threads to get their turn.
class ParticipantTest : public ::testing::Test {
 protected:
  static constexpr Duration kHeartbeatTimeout = seconds(5);
  static constexpr Duration kLastCall = seconds(30);

  void MakeWorld(int min_nodes, int max_nodes, int max_restarts = 0) {
    min_nodes_ = min_nodes;
    max_nodes_ = max_nodes;
    max_restarts_ = max_restarts;
    CoordinatorOptions co;
    co.run_id = "job";
    co.min_nodes = min_nodes;
    co.max_nodes = max_nodes;
    co.max_restarts = max_restarts;
    co.last_call_timeout = kLastCall;
    co.heartbeat_timeout = kHeartbeatTimeout;
    co.store_addr = "10.0.0.9";
    co.store_port = 29400;
    world_ = std::make_unique<FakeWorld>(co);
  }

  void TearDown() override {
    for (auto& [id, a] : agents_) a->rdzv.reset();
  }

  // Starts node `id` and waits until it has asked for a round, so that
  // nodes join in the order a test starts them.
  Agent& StartNode(const std::string& id, bool hosts = false, bool may_take_over = false) {
    Options o;
    o.backend = "c10d";
    o.run_id = "job";
    o.node_id = id;
    o.min_nodes = min_nodes_;
    o.max_nodes = max_nodes_;
    o.max_restarts = max_restarts_;
    o.nproc = 2;
    o.listed_nodes = listed_nodes_;
    o.join_timeout = seconds(600);
    o.last_call_timeout = kLastCall;
    o.heartbeat_interval = Duration(2);  // real: the control thread's pace
    o.heartbeat_timeout = kHeartbeatTimeout;
    auto& a = agents_[id];
    a = std::make_unique<Agent>();
    a->id = id;
    Agent* agent = a.get();
    a->rdzv =
        MakeParticipant(io_, o, std::make_unique<FakeMedium>(*world_, id, hosts, may_take_over),
                        [w = world_.get()] { return w->Now(); });
    Status s = a->rdzv->Start({[agent](RoundOutcome r) { agent->outcomes.push_back(std::move(r)); },
                               [agent](const RoundEnd& e) { agent->ends.push_back(e); }});
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(Pump([&] { return world_->Ready(id); })) << id << " never asked for a round";
    return *a;
  }

  // A world whose max_nodes are `ids`, the first its host and
  // `may_take_over` the one that may take its place, the nodes started in
  // order; then their first round, at max_nodes. Empty if it never came.
  std::vector<Agent*> FirstRound(int min_nodes, const std::vector<std::string>& ids,
                                 int max_restarts = 0, const std::string& may_take_over = "") {
    MakeWorld(min_nodes, static_cast<int>(ids.size()), max_restarts);
    std::vector<Agent*> nodes;
    for (const auto& id : ids) nodes.push_back(&StartNode(id, nodes.empty(), id == may_take_over));
    bool formed = Pump([&] {
      return std::all_of(nodes.begin(), nodes.end(), [](Agent* n) { return n->round(); });
    });
    return formed ? nodes : std::vector<Agent*>{};
  }

  // A first round of a (the host) and b, which may not take over; then a
  // dies. b once it heard that its round ended, or nullptr.
  Agent* SurvivorOfTheHost() {
    auto nodes = FirstRound(2, {"a", "b"});
    if (nodes.size() != 2) return nullptr;
    world_->KillHost();
    nodes[0]->rdzv->Shutdown();
    Agent* b = nodes[1];
    return Pump([&] { return !b->ends.empty(); }) ? b : nullptr;
  }

  // Runs the loop's handlers until `done`, or gives up after a (real) limit
  // generous for a loaded machine.
  bool Pump(const std::function<bool()>& done) {
    auto limit = Clock::now() + seconds(20);
    while (!done()) {
      if (Clock::now() > limit) return false;
      io_.run_one_for(Duration(2));
    }
    return true;
  }

  // Moves virtual time by `total` in steps shorter than a heartbeat
  // timeout, each after a heartbeat of every node in `alive`: the nodes the
  // test keeps alive stay so, whatever the real clock did meanwhile.
  void AdvanceKeepingAlive(Duration total, const std::vector<std::string>& alive) {
    const Duration step = seconds(1);
    for (Duration moved{0}; moved < total; moved += step) {
      std::map<std::string, int64_t> before;
      for (const auto& id : alive) before[id] = world_->Heartbeats(id);
      ASSERT_TRUE(Pump([&] {
        for (const auto& id : alive) {
          if (world_->Heartbeats(id) <= before[id]) return false;
        }
        return true;
      }));
      world_->Advance(std::min(step, total - moved));
    }
  }

  // Moves virtual time a second at a time until `done` (at most `limit`).
  bool AdvanceUntil(const std::function<bool()>& done, Duration limit) {
    for (Duration moved{0}; moved <= limit; moved += seconds(1)) {
      auto until = Clock::now() + Duration(5);
      while (Clock::now() < until) io_.run_one_for(Duration(1));
      if (done()) return true;
      world_->Advance(seconds(1));
    }
    return false;
  }

  static std::vector<std::string> Ids(const Round& r) {
    std::vector<std::string> ids;
    for (const auto& p : r.participants) ids.push_back(p.id);
    return ids;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io_);
  int min_nodes_ = 1;
  int max_nodes_ = 1;
  int max_restarts_ = 0;
  int listed_nodes_ = 64;
  std::unique_ptr<FakeWorld> world_;  // outlives the agents
  std::map<std::string, std::unique_ptr<Agent>> agents_;
};

// max_nodes ready: the round closes at once, in join order, and every node
// reads the same round.
TEST_F(ParticipantTest, RoundClosesAtMaxNodesInJoinOrder) {
  auto nodes = FirstRound(2, {"a", "b", "c"});
  ASSERT_EQ(nodes.size(), 3u);
  Agent &a = *nodes[0], &b = *nodes[1], &c = *nodes[2];
  for (Agent* n : {&a, &b, &c}) {
    EXPECT_EQ(n->round()->number, 0);
    EXPECT_EQ(Ids(*n->round()), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(n->round()->world_size, 6);
    EXPECT_EQ(n->round()->store_addr, "10.0.0.9");
    EXPECT_EQ(n->round()->store_port, 29400);
    EXPECT_EQ(n->round()->failures, 0);
  }
  EXPECT_EQ(a.round()->group_rank, 0);
  EXPECT_EQ(c.round()->group_rank, 2);
  EXPECT_EQ(c.round()->rank_offset, 4);
}

// A round larger than listed_nodes: each node but group rank 0 reads only
// its placement, never the whole round, and knows all it needs to start its
// workers.
TEST_F(ParticipantTest, ALargeRoundIsNotReadWhole) {
  listed_nodes_ = 2;
  auto nodes = FirstRound(2, {"a", "b", "c"});
  ASSERT_EQ(nodes.size(), 3u);
  for (int g = 0; g < 3; ++g) {
    const Round& r = *nodes[static_cast<size_t>(g)]->round();
    // Group rank 0 reads it: the hang watch's judge asks every node.
    EXPECT_EQ(r.participants.size(), g == 0 ? 3u : 0u);
    EXPECT_EQ(r.group_rank, g);
    EXPECT_EQ(r.nodes, 3);
    EXPECT_EQ(r.world_size, 6);
    EXPECT_EQ(r.rank_offset, 2 * g);
    EXPECT_EQ(r.store_addr, "10.0.0.9");
    EXPECT_EQ(r.store_port, 29400);
  }
}

// Above min_nodes and below max: the round waits last_call_timeout for more
// nodes, on the coordinator's clock, then closes with those it has.
TEST_F(ParticipantTest, RoundClosesAboveMinAfterTheLastCall) {
  MakeWorld(2, 3);
  Agent& a = StartNode("a", /*hosts=*/true);
  Agent& b = StartNode("b");
  AdvanceKeepingAlive(kLastCall - seconds(1), {"a", "b"});
  io_.poll();
  EXPECT_TRUE(a.outcomes.empty());
  EXPECT_TRUE(b.outcomes.empty());
  AdvanceKeepingAlive(seconds(1), {"a", "b"});
  ASSERT_TRUE(Pump([&] { return a.round() && b.round(); }));
  EXPECT_EQ(Ids(*b.round()), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b.round()->group_rank, 1);
}

// A node whose connection closes is lost: the round ends for the others as
// a change of membership (no restart spent), and the survivors form the
// next round as soon as they are all back. A node that leaves says so.
TEST_F(ParticipantTest, ANodeLostOrLeavingEndsTheRoundAndSurvivorsGoOn) {
  auto nodes = FirstRound(1, {"a", "b", "c"});
  ASSERT_EQ(nodes.size(), 3u);
  Agent &a = *nodes[0], &b = *nodes[1], &c = *nodes[2];

  world_->Cut("c");
  ASSERT_TRUE(Pump([&] { return !a.ends.empty() && !b.ends.empty(); }));
  for (Agent* n : {&a, &b}) {
    EXPECT_EQ(n->ends[0].cause, RoundEnd::Cause::kMembership);
    EXPECT_NE(n->ends[0].reason.find("lost c"), std::string::npos) << n->ends[0].reason;
    EXPECT_NE(n->ends[0].reason.find("connection to the store closed"), std::string::npos);
  }
  c.rdzv->Shutdown();
  a.rdzv->Ready();
  b.rdzv->Ready();
  ASSERT_TRUE(Pump([&] { return a.outcomes.size() == 2 && b.outcomes.size() == 2; }));
  ASSERT_NE(a.round(), nullptr);
  EXPECT_EQ(a.round()->number, 1);
  EXPECT_EQ(a.round()->failures, 0);
  EXPECT_EQ(Ids(*a.round()), (std::vector<std::string>{"a", "b"}));

  b.rdzv->Shutdown();
  ASSERT_TRUE(Pump([&] { return a.ends.size() == 2; }));
  EXPECT_EQ(a.ends[1].cause, RoundEnd::Cause::kMembership);
  // Its "left" or its closed connection, whichever the coordinator hears
  // first.
  EXPECT_NE(a.ends[1].reason.find(" b "), std::string::npos) << a.ends[1].reason;
}

// The host dies: a survivor that may serve the endpoint takes the store
// over; everyone joins it carrying the round number and the last round's
// nodes, so the new host's first round closes once those survivors are
// back, without a last call, and goes on numbering from the old one.
TEST_F(ParticipantTest, ASurvivorTakesTheStoreOverWhenTheHostDies) {
  auto nodes = FirstRound(2, {"a", "b", "c"}, /*max_restarts=*/0, /*may_take_over=*/"b");
  ASSERT_EQ(nodes.size(), 3u);
  Agent &a = *nodes[0], &b = *nodes[1], &c = *nodes[2];

  world_->KillHost();
  a.rdzv->Shutdown();
  ASSERT_TRUE(Pump([&] { return !b.ends.empty() && !c.ends.empty(); }));
  for (Agent* n : {&b, &c}) {
    EXPECT_EQ(n->ends[0].cause, RoundEnd::Cause::kMembership);
    EXPECT_EQ(n->ends[0].reason, "membership: lost the fake store (a)");
  }
  b.rdzv->Ready();
  c.rdzv->Ready();
  ASSERT_TRUE(Pump([&] { return b.outcomes.size() == 2 && c.outcomes.size() == 2; }));
  EXPECT_EQ(world_->host(), "b");
  for (Agent* n : {&b, &c}) {
    ASSERT_NE(n->round(), nullptr);
    EXPECT_EQ(n->round()->number, 1);
    auto ids = Ids(*n->round());
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<std::string>{"b", "c"}));
  }
}

// A node's workers fail and its agent asks for the next round (Failed,
// then Ready) before the node hears that the host is gone: its failure
// never reached the host, which hangs, then dies. The node takes over and
// is ready in its first join there, as its agent asked: the agent, with no
// workers left to stop, asks only once.
TEST_F(ParticipantTest, AReadyGivenBeforeTheHostsLossIsKept) {
  auto nodes = FirstRound(1, {"a", "b"}, /*max_restarts=*/0, /*may_take_over=*/"b");
  ASSERT_EQ(nodes.size(), 2u);
  Agent &a = *nodes[0], &b = *nodes[1];

  world_->Hang();
  b.rdzv->Failed("rank 1 exited with 1");
  b.rdzv->Ready();
  world_->KillHost();
  a.rdzv->Shutdown();
  ASSERT_TRUE(AdvanceUntil([&] { return b.outcomes.size() == 2; }, 3 * kLastCall));
  EXPECT_EQ(world_->host(), "b");
  ASSERT_NE(b.round(), nullptr);
  EXPECT_EQ(b.round()->number, 1);
  EXPECT_EQ(Ids(*b.round()), (std::vector<std::string>{"b"}));
}

// The agent's workers succeed after the node heard of the host's loss,
// while it joins anew: the "done" it would send is for no host, and moot.
// It once stayed queued, so the control thread's wait for a message found
// one at once, forever, holding the lock the main thread needs.
TEST_F(ParticipantTest, ASuccessWhileJoiningAnewStallsNothing) {
  Agent* survivor = SurvivorOfTheHost();
  ASSERT_NE(survivor, nullptr);
  Agent& b = *survivor;
  b.rdzv->Succeeded([&] { ++b.done; });
  ASSERT_TRUE(
      AdvanceUntil([&] { return b.outcomes.size() == 2 || b.done > 0; }, 3 * kHeartbeatTimeout));
  if (b.done == 0) {
    ASSERT_NE(b.no_round(), nullptr);
    EXPECT_NE(b.no_round()->why.message().find("no surviving node could take it over"),
              std::string::npos)
        << b.no_round()->why.message();
  }
}

// The host dies and no survivor may serve the endpoint: once a heartbeat
// timeout has passed without a new host, the node gets no round, and the
// message says why nobody took over.
TEST_F(ParticipantTest, NoRoundWhenNobodyMayTakeOver) {
  Agent* survivor = SurvivorOfTheHost();
  ASSERT_NE(survivor, nullptr);
  Agent& b = *survivor;
  b.rdzv->Ready();
  ASSERT_TRUE(AdvanceUntil([&] { return b.outcomes.size() == 2; }, 3 * kHeartbeatTimeout));
  ASSERT_NE(b.no_round(), nullptr);
  EXPECT_EQ(b.no_round()->kind, NoRound::Kind::kOther);
  EXPECT_NE(b.no_round()->why.message().find("no surviving node could take it over: no fake node "
                                             "may serve the endpoint"),
            std::string::npos)
      << b.no_round()->why.message();
}

// A node whose heartbeats stop arriving is lost after heartbeat_timeout on
// the coordinator's clock; the others' round ends.
TEST_F(ParticipantTest, TheCoordinatorLosesANodeWithoutHeartbeats) {
  auto nodes = FirstRound(2, {"a", "b", "c"});
  ASSERT_EQ(nodes.size(), 3u);
  Agent &a = *nodes[0], &b = *nodes[1];

  world_->Silence("c");
  AdvanceKeepingAlive(kHeartbeatTimeout - seconds(1), {"a", "b"});
  io_.poll();
  EXPECT_TRUE(a.ends.empty());
  AdvanceKeepingAlive(seconds(1), {"a", "b"});
  ASSERT_TRUE(Pump([&] { return !a.ends.empty() && !b.ends.empty(); }));
  EXPECT_EQ(b.ends[0].cause, RoundEnd::Cause::kMembership);
  EXPECT_NE(b.ends[0].reason.find("lost c"), std::string::npos) << b.ends[0].reason;
  EXPECT_NE(b.ends[0].reason.find("no heartbeat for 5 s"), std::string::npos);
}

// A host cut off from the network keeps its connections open and answers
// nothing: a node notices after heartbeat_timeout on its own clock, and
// ends its round as a lost host.
TEST_F(ParticipantTest, ANodeGivesUpOnASilentHostAfterTheHeartbeatTimeout) {
  auto nodes = FirstRound(2, {"a", "b"});
  ASSERT_EQ(nodes.size(), 2u);
  Agent& b = *nodes[1];

  world_->Hang();
  // The node retries a heartbeat every 100 ms of real time.
  ASSERT_TRUE(AdvanceUntil([&] { return !b.ends.empty(); }, seconds(600)));
  EXPECT_GE(world_->Now() - Clock::time_point{}, kHeartbeatTimeout);
  EXPECT_EQ(b.ends[0].cause, RoundEnd::Cause::kMembership);
  EXPECT_EQ(b.ends[0].reason, "membership: lost the fake store (a)");
}

// Nobody to reach within join_timeout (on the node's clock): a typed
// timeout.
// Unanswered, a node says once why after 30 s, and gives up at
// join_timeout, naming what it could not reach.
TEST_F(ParticipantTest, JoinTimesOutWithoutAHost) {
  MakeWorld(1, 1);
  Options o;
  o.backend = "c10d";
  o.node_id = "a";
  o.join_timeout = seconds(40);
  o.heartbeat_interval = Duration(2);
  Agent a;
  a.rdzv = MakeParticipant(io_, o, std::make_unique<FakeMedium>(*world_, "a", false, false),
                           [w = world_.get()] { return w->Now(); });
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(a.rdzv
                  ->Start({[&](RoundOutcome r) { a.outcomes.push_back(std::move(r)); },
                           [&](const RoundEnd& e) { a.ends.push_back(e); }})
                  .ok());
  bool got = AdvanceUntil([&] { return !a.outcomes.empty(); }, seconds(60));
  a.rdzv.reset();
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got);
  const std::string why = "the fake store has not let this node in for 3";
  ASSERT_NE(said.find(why), std::string::npos) << said;
  EXPECT_EQ(said.find(why, said.find(why) + 1), std::string::npos) << said;
  EXPECT_NE(said.find("s more"), std::string::npos) << said;
  ASSERT_NE(a.no_round(), nullptr);
  EXPECT_EQ(a.no_round()->kind, NoRound::Kind::kTimedOut);
  EXPECT_NE(a.no_round()->why.message().find("cannot reach the fake store within join_timeout"),
            std::string::npos)
      << a.no_round()->why.message();
}

// A node's failure ends the round for all as a peer failure and spends one
// restart for the job, not one per node; past --max-restarts every node is
// told, typed, that the budget is spent.
TEST_F(ParticipantTest, FailedRoundsSpendTheBudgetThenNoRound) {
  auto nodes = FirstRound(2, {"a", "b"}, /*max_restarts=*/1);
  ASSERT_EQ(nodes.size(), 2u);
  Agent &a = *nodes[0], &b = *nodes[1];

  for (size_t failed = 1; failed <= 2; ++failed) {
    a.rdzv->Failed("rank 0 exited with 1");
    ASSERT_TRUE(Pump([&] { return a.ends.size() == failed && b.ends.size() == failed; }));
    EXPECT_EQ(b.ends.back().cause, RoundEnd::Cause::kPeerFailure);
    EXPECT_EQ(b.ends.back().reason, "failure: a: rank 0 exited with 1");
    a.rdzv->Ready();
    b.rdzv->Ready();
    ASSERT_TRUE(
        Pump([&] { return a.outcomes.size() == failed + 1 && b.outcomes.size() == failed + 1; }));
  }
  // The first failure: a new round, one restart spent.
  ASSERT_TRUE(std::holds_alternative<Round>(b.outcomes[1]));
  EXPECT_EQ(std::get<Round>(b.outcomes[1]).number, 1);
  EXPECT_EQ(std::get<Round>(b.outcomes[1]).failures, 1);
  // The second: no round, for either node.
  for (Agent* n : {&a, &b}) {
    ASSERT_NE(n->no_round(), nullptr);
    EXPECT_EQ(n->no_round()->kind, NoRound::Kind::kBudgetSpent);
    EXPECT_NE(n->no_round()->why.message().find("restart budget of the job is spent (2 failed "
                                                "rounds, --max-restarts 1)"),
              std::string::npos)
        << n->no_round()->why.message();
  }
}

// The exit barrier: a node's `done` runs once every node of the round has
// succeeded.
TEST_F(ParticipantTest, SucceededWaitsForEveryNode) {
  auto nodes = FirstRound(2, {"a", "b"});
  ASSERT_EQ(nodes.size(), 2u);
  Agent &a = *nodes[0], &b = *nodes[1];
  const int64_t beats = world_->Heartbeats("a");
  a.rdzv->Succeeded([&] { ++a.done; });
  // A heartbeat after the one under way follows a's "done".
  ASSERT_TRUE(Pump([&] { return world_->Heartbeats("a") > beats + 1; }));
  io_.poll();
  EXPECT_EQ(a.done, 0);
  b.rdzv->Succeeded([&] { ++b.done; });
  ASSERT_TRUE(Pump([&] { return a.done == 1 && b.done == 1; }));
  EXPECT_TRUE(a.ends.empty());
}

}  // namespace
}  // namespace trun::rendezvous
