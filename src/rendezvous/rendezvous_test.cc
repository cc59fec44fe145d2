#include "rendezvous/rendezvous.h"

#include <gtest/gtest.h>

#include <asio.hpp>
#include <string>
#include <variant>
#include <vector>

namespace trun::rendezvous {
namespace {

// end/<r>'s text (docs/rendezvous.md) is read once, into a cause; the reason
// stays whole for the log.
TEST(RoundEndTest, CauseFromTheProtocolsText) {
  RoundEnd joined = RoundEnd::FromWire("membership: node-b_12_00ab joined");
  EXPECT_EQ(joined.cause, RoundEnd::Cause::kMembership);
  EXPECT_EQ(joined.reason, "membership: node-b_12_00ab joined");
  EXPECT_EQ(CauseName(joined.cause), "membership");

  RoundEnd failed = RoundEnd::FromWire("failure: node-a_7_1f2e: rank 1 exited with 3");
  EXPECT_EQ(failed.cause, RoundEnd::Cause::kPeerFailure);
  EXPECT_EQ(CauseName(failed.cause), "peer_failure");

  // A prefix is a prefix: the words elsewhere in a reason do not count.
  RoundEnd other = RoundEnd::FromWire("done, not a failure: or membership:");
  EXPECT_EQ(other.cause, RoundEnd::Cause::kOther);
  EXPECT_EQ(CauseName(other.cause), "round_ended");
}

// One node counts its own budget, in rounds, and says it is spent as a
// typed outcome, not an error the agent must tell apart from others.
TEST(SingleNodeTest, ASpentBudgetIsATypedOutcome) {
  asio::io_context io;
  Options o;
  o.max_restarts = 1;
  o.nproc = 2;
  o.single_node = Options::SingleNode{"127.0.0.1", 0};
  auto rdzv = Make(io, o);
  ASSERT_TRUE(rdzv.ok()) << rdzv.status().message();
  std::vector<RoundOutcome> got;
  ASSERT_TRUE(
      (*rdzv)
          ->Start({[&](RoundOutcome r) { got.push_back(std::move(r)); }, [](const RoundEnd&) {}})
          .ok());
  // poll, not run: the store's acceptor keeps the loop busy for good.
  io.poll();
  (*rdzv)->Failed("rank 0 exited with 1");
  (*rdzv)->Ready();
  io.poll();
  (*rdzv)->Failed("rank 1 exited with 3");
  (*rdzv)->Ready();
  io.poll();
  (*rdzv)->Shutdown();

  ASSERT_EQ(got.size(), 3u);
  ASSERT_TRUE(std::holds_alternative<Round>(got[0]));
  EXPECT_EQ(std::get<Round>(got[0]).world_size, 2);
  ASSERT_TRUE(std::holds_alternative<Round>(got[1]));
  EXPECT_EQ(std::get<Round>(got[1]).number, 1);
  EXPECT_EQ(std::get<Round>(got[1]).failures, 1);
  ASSERT_TRUE(std::holds_alternative<NoRound>(got[2]));
  const auto& none = std::get<NoRound>(got[2]);
  EXPECT_EQ(none.kind, NoRound::Kind::kBudgetSpent);
  EXPECT_EQ(none.why.message(),
            "the restart budget is spent (--max-restarts 1); last failure: rank 1 exited with 3");
}

}  // namespace
}  // namespace trun::rendezvous
