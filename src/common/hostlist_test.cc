#include "common/hostlist.h"

#include <gtest/gtest.h>

namespace trun {
namespace {

std::vector<std::string> Expand(std::string_view s) {
  auto r = ExpandHostlist(s);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<std::string>{};
}

using V = std::vector<std::string>;

TEST(Hostlist, PlainNames) {
  EXPECT_EQ(Expand("node1"), V{"node1"});
  EXPECT_EQ(Expand("a,b,c.example.com"), (V{"a", "b", "c.example.com"}));
}

TEST(Hostlist, RangesAndSingles) {
  EXPECT_EQ(Expand("node[1-3]"), (V{"node1", "node2", "node3"}));
  EXPECT_EQ(Expand("node[1-2,5]"), (V{"node1", "node2", "node5"}));
  EXPECT_EQ(Expand("node[1-2],gpu7"), (V{"node1", "node2", "gpu7"}));
}

TEST(Hostlist, ZeroPaddingFollowsTheLowerBound) {
  EXPECT_EQ(Expand("n[08-11]"), (V{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(Expand("n[098-100]"), (V{"n098", "n099", "n100"}));
}

TEST(Hostlist, SuffixesAndSeveralGroupsMultiply) {
  EXPECT_EQ(Expand("r[1-2]-n[1-2].ib"), (V{"r1-n1.ib", "r1-n2.ib", "r2-n1.ib", "r2-n2.ib"}));
  EXPECT_EQ(Expand("a[1,3]b,c[2-3]"), (V{"a1b", "a3b", "c2", "c3"}));
}

TEST(Hostlist, WhatScontrolPrintsForTheTestCluster) {
  // `scontrol show hostnames node[1-2]` on the cluster tools/slurm-cluster starts.
  EXPECT_EQ(Expand("node[1-2]"), (V{"node1", "node2"}));
}

TEST(Hostlist, MistakesNameTheList) {
  for (const char* bad : {"", "node[1-", "node1]", "node[3-1]", "node[a-b]", "node[]", "n[1-2],,x",
                          "n[0-99999999]"}) {
    auto r = ExpandHostlist(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("host list"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace trun
