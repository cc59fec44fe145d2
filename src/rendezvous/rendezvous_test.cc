#include "rendezvous/rendezvous.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trun::rendezvous
