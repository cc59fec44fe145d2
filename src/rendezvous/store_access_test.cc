#include "rendezvous/store_access.h"

#include <gtest/gtest.h>

#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {
namespace {

bool Allows(const store::Allowlist& list, const char* addr) {
  for (const auto& n : list.networks) {
    if (n.Contains(asio::ip::make_address(addr))) return true;
  }
  return false;
}

TEST(StoreAccess, TheRoundsHostsAndStoreAllow) {
  auto none = ParseStoreAccess({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->any);
  auto list = AllowlistFor(*none, {{"a", "10.200.0.1", 1, 0}, {"b", "fd00::2", 1, 0}}, "/p/");
  ASSERT_TRUE(list.has_value());
  EXPECT_TRUE(Allows(*list, "10.200.0.1"));
  EXPECT_TRUE(Allows(*list, "fd00::2"));
  EXPECT_FALSE(Allows(*list, "10.200.0.3"));
  EXPECT_EQ(list->strangers_prefix, "/p/");
  EXPECT_NE(list->widen_hint.find("store_allow=any"), std::string::npos);
  // A name is resolved to its addresses.
  auto named = AllowlistFor(*none, {{"l", "localhost", 1, 0}}, "");
  ASSERT_TRUE(named.has_value());
  EXPECT_TRUE(Allows(*named, "127.0.0.1") || Allows(*named, "::1"));

  auto wide = ParseStoreAccess({{"store_allow", "10.9.0.0/16;192.168.1.7"}});
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  auto l2 = AllowlistFor(*wide, {}, "");
  EXPECT_TRUE(Allows(*l2, "10.9.3.4"));
  EXPECT_TRUE(Allows(*l2, "192.168.1.7"));
  EXPECT_FALSE(Allows(*l2, "10.8.3.4"));

  auto any = ParseStoreAccess({{"store_allow", "any"}});
  ASSERT_TRUE(any.ok());
  EXPECT_FALSE(AllowlistFor(*any, {}, "/p/").has_value());

  auto bad = ParseStoreAccess({{"store_allow", "10.0.0.0/40"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--rdzv-conf store_allow=10.0.0.0/40"), std::string::npos);
}

}  // namespace
}  // namespace trun::rendezvous
