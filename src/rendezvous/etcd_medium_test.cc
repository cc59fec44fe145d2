#include "rendezvous/etcd_medium.h"

#include <gtest/gtest.h>

namespace trun::rendezvous {
namespace {

TEST(JoinKeysTest, APutIsAJoinNumberedByItsRevision) {
  JoinKeys j;
  auto h = j.OnPut("join/7", 41);
  EXPECT_EQ(h.joined, 41);
  EXPECT_FALSE(h.gone);
  // The same event again (a watch's replay) is nothing new.
  h = j.OnPut("join/7", 41);
  EXPECT_FALSE(h.joined || h.gone);
}

TEST(JoinKeysTest, ADeletionEndsTheNodeOfThatKey) {
  JoinKeys j;
  j.OnPut("join/7", 41);
  j.OnPut("join/8", 42);
  auto h = j.OnDelete("join/7");
  EXPECT_EQ(h.gone, 41);
  EXPECT_FALSE(h.joined);
  // Unknown (joined before this coordinator) or ended already: nothing.
  h = j.OnDelete("join/7");
  EXPECT_FALSE(h.joined || h.gone);
  EXPECT_EQ(j.OnDelete("join/8").gone, 42);
}

TEST(JoinKeysTest, APutOverTheKeyEndsTheOldNumber) {
  JoinKeys j;
  j.OnPut("join/7", 41);
  auto h = j.OnPut("join/7", 50);
  EXPECT_EQ(h.gone, 41);
  EXPECT_EQ(h.joined, 50);
  EXPECT_EQ(j.OnDelete("join/7").gone, 50);
}

}  // namespace
}  // namespace trun::rendezvous
