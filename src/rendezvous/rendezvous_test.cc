#include "rendezvous/rendezvous.h"

#include <gtest/gtest.h>

namespace trun::rendezvous {
namespace {

// torch's static rendezvous takes MAX as its world size; its config keeps
// MIN (launch/args.cc), so the rendezvous is where MAX wins.
TEST(RendezvousOptionsTest, StaticWaitsForMaxNodesAndC10dForMin) {
  launch::LaunchConfig c;
  c.min_nodes = 1;
  c.max_nodes = 2;
  c.rdzv_backend = "static";
  EXPECT_EQ(OptionsFromConfig(c).min_nodes, 2);
  c.rdzv_backend = "c10d";
  EXPECT_EQ(OptionsFromConfig(c).min_nodes, 1);
  EXPECT_EQ(OptionsFromConfig(c).max_nodes, 2);
}

}  // namespace
}  // namespace trun::rendezvous
