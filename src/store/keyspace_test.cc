#include "store/keyspace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "store/wire_format.h"

namespace trun::store {
namespace {

// Records what the keyspace reports, in order; `on_wait_done` lets a test
// call back into the keyspace as the server does when a reply drops a
// connection.
struct Recorder : KeyspaceListener {
  struct Watch {
    std::vector<uint64_t> watchers;
    uint8_t event;
    std::string key, old_value, new_value;
  };
  std::vector<uint64_t> done;
  std::vector<Watch> watched;
  std::vector<std::pair<std::string, std::string>> changed;
  std::function<void(uint64_t)> on_wait_done;

  void WaitDone(uint64_t owner, bool) override {
    done.push_back(owner);
    if (on_wait_done) on_wait_done(owner);
  }
  void Watched(const std::vector<uint64_t>& watchers, uint8_t event, const std::string& key,
               std::string_view old_value, std::string_view new_value) override {
    watched.push_back({watchers, event, key, std::string(old_value), std::string(new_value)});
  }
  void Changed(const std::string& key, const std::string& value) override {
    changed.emplace_back(key, value);
  }
};

class KeyspaceTest : public ::testing::Test {
 protected:
  Recorder events;
  Keyspace keys{events, 16};
};

std::vector<std::string> Keys(std::initializer_list<const char*> names) {
  return {names.begin(), names.end()};
}

TEST_F(KeyspaceTest, SetFindDeleteAndCompareSet) {
  EXPECT_EQ(keys.Find("a"), nullptr);
  keys.Set("a", "1");
  ASSERT_NE(keys.Find("a"), nullptr);
  EXPECT_EQ(*keys.Find("a"), "1");
  // COMPARE_SET as torch: a missing key is set only for an empty expected,
  // and otherwise the expected value comes back.
  EXPECT_EQ(keys.CompareSet("b", "x", "y"), "x");
  EXPECT_EQ(keys.Find("b"), nullptr);
  EXPECT_EQ(keys.CompareSet("b", "", "y"), "y");
  EXPECT_EQ(keys.CompareSet("b", "nope", "z"), "y");
  EXPECT_EQ(keys.CompareSet("b", "y", "z"), "z");
  EXPECT_EQ(keys.num_keys(), 2u);
  EXPECT_TRUE(keys.Delete("a"));
  EXPECT_FALSE(keys.Delete("a"));
  EXPECT_EQ(keys.num_keys(), 1u);
  // Every change that set a value reached the observer; the refused
  // COMPARE_SETs and the DELETE did not.
  using Change = std::pair<std::string, std::string>;
  EXPECT_EQ(events.changed, (std::vector<Change>{{"a", "1"}, {"b", "y"}, {"b", "z"}}));
}

TEST_F(KeyspaceTest, AddCountsWrapsAndRefusesANonInteger) {
  EXPECT_EQ(*keys.Add("n", 5), 5);
  EXPECT_EQ(*keys.Add("n", -7), -2);
  keys.Set("big", std::to_string(INT64_MAX));
  EXPECT_EQ(*keys.Add("big", 1), INT64_MIN);
  keys.Set("s", "abc");
  auto bad = keys.Add("s", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "ADD to non-integer key 's'");
  EXPECT_EQ(*keys.Find("s"), "abc");
}

TEST_F(KeyspaceTest, AppendGrowsUpToTheValueLimit) {
  ASSERT_TRUE(keys.Append("a", "0123456789").ok());
  ASSERT_TRUE(keys.Append("a", "abcdef").ok());
  EXPECT_EQ(*keys.Find("a"), "0123456789abcdef");
  Status over = keys.Append("a", "!");
  EXPECT_FALSE(over.ok());
  EXPECT_NE(over.message().find("over the value limit"), std::string::npos);
  EXPECT_EQ(keys.Find("a")->size(), 16u);
}

TEST_F(KeyspaceTest, WaitIsAnsweredWhenItsLastKeyAppears) {
  keys.Set("a", "1");
  auto present = Keys({"a"});
  EXPECT_TRUE(keys.Wait(7, present));
  auto some = Keys({"a", "b", "c"});
  EXPECT_FALSE(keys.Wait(7, some));
  EXPECT_EQ(keys.num_waits(), 1u);
  keys.Set("b", "x");
  EXPECT_TRUE(events.done.empty());
  // ADD makes a key as SET does.
  ASSERT_TRUE(keys.Add("c", 1).ok());
  EXPECT_EQ(events.done, std::vector<uint64_t>{7});
  EXPECT_EQ(keys.num_waits(), 0u);
  EXPECT_EQ(keys.num_wait_index_entries(), 0u);
  // A queue with items counts as an existing key, for CHECK and WAIT.
  EXPECT_FALSE(keys.AllExist(Keys({"a", "q"})));
  keys.Push("q", "item");
  EXPECT_TRUE(keys.AllExist(Keys({"a", "q"})));
}

TEST_F(KeyspaceTest, ManyWaitersOnOneKeyWakeTogetherOnce) {
  for (uint64_t owner = 1; owner <= 100; ++owner) {
    auto k = Keys({"go"});
    EXPECT_FALSE(keys.Wait(owner, k));
  }
  keys.Set("go", "1");
  EXPECT_EQ(events.done.size(), 100u);
  keys.Set("go", "2");
  EXPECT_EQ(events.done.size(), 100u);
  EXPECT_EQ(keys.num_waits(), 0u);
}

TEST_F(KeyspaceTest, CancelledWaitsAreNeverAnsweredAndDoNotPileUpInTheIndex) {
  for (int round = 0; round < 1000; ++round) {
    auto k = Keys({"never"});
    EXPECT_FALSE(keys.Wait(1, k));
    keys.CancelWaits(1);
  }
  EXPECT_EQ(keys.num_waits(), 0u);
  // Dead entries are compacted once half the list is dead.
  EXPECT_LE(keys.num_wait_index_entries(), 2u);
  keys.Set("never", "now");
  EXPECT_TRUE(events.done.empty());
}

TEST_F(KeyspaceTest, AForgottenOwnerIsNeitherAnsweredNorTold) {
  auto k = Keys({"a"});
  EXPECT_FALSE(keys.Wait(3, k));
  keys.Watch(3, "a");
  keys.Forget(3);
  EXPECT_EQ(keys.num_waits(), 0u);
  keys.Set("a", "1");
  EXPECT_TRUE(events.done.empty());
  EXPECT_TRUE(events.watched.empty());
}

TEST_F(KeyspaceTest, AnOwnerForgottenDuringAWakeUpIsSkipped) {
  // Answering owner 1 overflows its connection in the server, which drops
  // owner 2 (say) on the way: 2's waiter must not be answered afterwards.
  for (uint64_t owner : {1, 2, 3}) {
    auto k = Keys({"go"});
    EXPECT_FALSE(keys.Wait(owner, k));
  }
  events.on_wait_done = [&](uint64_t owner) {
    if (owner == 1) keys.Forget(2);
  };
  keys.Set("go", "1");
  EXPECT_EQ(events.done, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(keys.num_waits(), 0u);
  EXPECT_EQ(keys.num_wait_index_entries(), 0u);
}

TEST_F(KeyspaceTest, BarrierCountsArrivalsAndTheLastReleasesTheRest) {
  EXPECT_FALSE(*keys.Barrier(1, "b", 3));
  EXPECT_FALSE(*keys.Barrier(2, "b", 3));
  EXPECT_EQ(*keys.Find("b"), "2");
  // The earlier arrivals wake nobody, their own waiters included.
  EXPECT_TRUE(events.done.empty());
  EXPECT_EQ(keys.num_waits(), 2u);
  EXPECT_TRUE(*keys.Barrier(3, "b", 3));
  EXPECT_EQ(*keys.Find("b"), "3");
  EXPECT_EQ(events.done, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(keys.num_waits(), 0u);
  // Arrivals past the world size pass at once.
  EXPECT_TRUE(*keys.Barrier(4, "b", 3));
}

TEST_F(KeyspaceTest, BarrierSharesTheWaitIndexWithSet) {
  // As in torch, where a SET of the key answers the barrier's waiters too.
  EXPECT_FALSE(*keys.Barrier(1, "b", 5));
  keys.Set("b", "0");
  EXPECT_EQ(events.done, std::vector<uint64_t>{1});
  keys.Set("s", "x");
  auto bad = keys.Barrier(2, "s", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "BARRIER on non-integer key 's'");
  EXPECT_EQ(*keys.Find("s"), "x");
  EXPECT_EQ(keys.num_waits(), 0u);
}

TEST_F(KeyspaceTest, CancelledBarrierArrivalIsNotAnswered) {
  EXPECT_FALSE(*keys.Barrier(1, "b", 2));
  keys.CancelWaits(1);
  EXPECT_TRUE(*keys.Barrier(2, "b", 2));
  EXPECT_TRUE(events.done.empty());
}

TEST_F(KeyspaceTest, WatchersHearEveryKindOfChange) {
  keys.Watch(5, "w");
  keys.Watch(6, "w");
  keys.Set("w", "a");
  keys.Set("w", "b");
  ASSERT_TRUE(keys.Append("w", "c").ok());
  EXPECT_TRUE(keys.Delete("w"));
  keys.Set("other", "x");
  ASSERT_EQ(events.watched.size(), 4u);
  const auto& e = events.watched;
  using Event = std::tuple<uint8_t, std::string, std::string>;
  std::vector<Event> got;
  for (const auto& w : e) got.emplace_back(w.event, w.old_value, w.new_value);
  EXPECT_EQ(got, (std::vector<Event>{{kWatchKeyCreated, "", "a"},
                                     {kWatchKeyUpdated, "a", "b"},
                                     {kWatchKeyAppended, "b", "bc"},
                                     {kWatchKeyDeleted, "bc", ""}}));
  auto watchers = e[0].watchers;
  std::sort(watchers.begin(), watchers.end());
  EXPECT_EQ(watchers, (std::vector<uint64_t>{5, 6}));
  keys.Forget(5);
  keys.Set("w", "again");
  ASSERT_EQ(events.watched.size(), 5u);
  EXPECT_EQ(events.watched[4].watchers, std::vector<uint64_t>{6});
}

TEST_F(KeyspaceTest, QueuePushWakesOneBlockingPop) {
  for (uint64_t owner : {1, 2}) {
    auto k = Keys({"q"});
    EXPECT_FALSE(keys.Wait(owner, k));
  }
  keys.Push("q", "first");
  EXPECT_EQ(events.done, std::vector<uint64_t>{1});
  keys.Push("q", "second");
  EXPECT_EQ(events.done, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(keys.QueueLength("q"), 2);
  std::string item;
  EXPECT_EQ(keys.Pop("q", &item), 2);
  EXPECT_EQ(item, "first");
  EXPECT_EQ(keys.Pop("q", &item), 1);
  EXPECT_EQ(item, "second");
  item.clear();
  EXPECT_EQ(keys.Pop("q", &item), 0);
  EXPECT_EQ(item, "");
  EXPECT_EQ(keys.QueueLength("q"), 0);
  // Queues are not keys.
  EXPECT_EQ(keys.num_keys(), 0u);
}

TEST_F(KeyspaceTest, CountAndListKeysLeaveOutTheHiddenOnes) {
  keys.Set("/trun/x", "1");
  keys.Set("/worker/a", "2");
  keys.Set("init/", "3");
  keys.Push("queue", "q");
  auto trun = [](std::string_view k) { return k.starts_with("/trun/"); };
  EXPECT_EQ(keys.CountKeys(trun), 2u);
  EXPECT_EQ(keys.CountKeys([](std::string_view) { return false; }), 3u);
  std::vector<std::string> listed;
  keys.ForEachKey([&](const std::string& k) { listed.push_back(k); });
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, Keys({"/trun/x", "/worker/a", "init/"}));
}

TEST_F(KeyspaceTest, EraseAllButKeepsOnlyThePrefixAndTellsNobody) {
  keys.Watch(1, "/worker/a");
  keys.Set("/trun/x", "1");
  keys.Set("/worker/a", "2");
  keys.Push("/worker/q", "3");
  keys.Push("/trun/q", "4");
  size_t watched = events.watched.size();
  EXPECT_EQ(keys.EraseAllBut("/trun/"), 2u);
  EXPECT_EQ(keys.num_keys(), 1u);
  EXPECT_EQ(keys.QueueLength("/worker/q"), 0);
  EXPECT_EQ(keys.QueueLength("/trun/q"), 1);
  EXPECT_EQ(events.watched.size(), watched);
}

}  // namespace
}  // namespace trun::store
