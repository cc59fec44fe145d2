#include "store/connection_table.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

namespace trun::store {
namespace {

struct Item {
  uint64_t id;
};
using Table = ConnectionTable<std::unique_ptr<Item>>;

TEST(ConnectionTableTest, FindsWhatWasAddedAndForgetsWhatWasErased) {
  Table t;
  EXPECT_EQ(t.Find(1), nullptr);
  EXPECT_EQ(t.Erase(1), nullptr);
  for (uint64_t id = 1; id <= 1000; ++id) t.Add(std::make_unique<Item>(Item{id}));
  EXPECT_EQ(t.size(), 1000u);
  for (uint64_t id = 1; id <= 1000; ++id) {
    ASSERT_NE(t.Find(id), nullptr);
    EXPECT_EQ(t.Find(id)->id, id);
  }
  EXPECT_EQ(t.Find(1001), nullptr);
  auto gone = t.Erase(500);
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->id, 500u);
  EXPECT_EQ(t.Find(500), nullptr);
  EXPECT_EQ(t.size(), 999u);
  size_t seen = 0;
  t.ForEach([&](const std::unique_ptr<Item>&) { ++seen; });
  EXPECT_EQ(seen, 999u);
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(1), nullptr);
}

// Erases shift the elements after them back; every element must stay
// reachable, whatever the order of adds and erases (checked against a
// std::map), including across growth and around the table's wrap.
TEST(ConnectionTableTest, EveryElementStaysReachableThroughAddsAndErases) {
  Table t;
  std::map<uint64_t, bool> live;
  std::mt19937_64 rng(31);
  uint64_t next = 1;
  for (int step = 0; step < 50000; ++step) {
    bool add = live.empty() || rng() % 100 < (live.size() < 1000 ? 60 : 40);
    if (add) {
      // Ids grow as the server's do, with gaps (a link's streams take some).
      next += 1 + rng() % 3;
      t.Add(std::make_unique<Item>(Item{next}));
      live[next] = true;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_NE(t.Erase(it->first), nullptr);
      live.erase(it);
    }
    if (step % 5000 == 0) {
      ASSERT_EQ(t.size(), live.size());
      for (const auto& [id, unused] : live) ASSERT_NE(t.Find(id), nullptr) << id;
    }
  }
  for (const auto& [id, unused] : live) ASSERT_NE(t.Find(id), nullptr) << id;
  for (uint64_t id = 1; id <= next; ++id) {
    if (!live.count(id)) {
      ASSERT_EQ(t.Find(id), nullptr) << id;
    }
  }
}

}  // namespace
}  // namespace trun::store
