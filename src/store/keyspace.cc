#include "store/keyspace.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"
#include "store/wire_format.h"

namespace trun::store {

Keyspace::Keyspace(KeyspaceListener& listener, size_t max_value_bytes)
    : listener_(listener), max_value_bytes_(max_value_bytes) {}

const std::string* Keyspace::Find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool Keyspace::Exists(const std::string& key) const {
  if (data_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void Keyspace::Store(const std::string& key, std::string value) {
  auto it = data_.find(key);
  bool created = it == data_.end();
  if (!watchers_.empty()) {
    TellWatchers(key, created ? kWatchKeyCreated : kWatchKeyUpdated,
                 created ? std::string_view() : std::string_view(it->second), value);
  }
  std::string& stored = data_[key];
  stored = std::move(value);
  WakeWaiters(key);
  listener_.Changed(key, stored);
}

void Keyspace::Set(const std::string& key, std::string value) { Store(key, std::move(value)); }

std::string Keyspace::CompareSet(const std::string& key, const std::string& expected,
                                 std::string desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return expected;
    std::string result = desired;
    Store(key, std::move(desired));
    return result;
  }
  if (it->second == expected) Store(key, std::move(desired));
  return data_[key];
}

Result<int64_t> Keyspace::Add(const std::string& key, int64_t delta) {
  auto it = data_.find(key);
  int64_t v = delta;
  if (it != data_.end()) {
    auto cur = ParseInt(it->second);
    if (!cur) return Status::InvalidArgument(fmt::format("ADD to non-integer key '{}'", key));
    // Wraps, as torch's servers do, rather than overflow.
    v = static_cast<int64_t>(static_cast<uint64_t>(*cur) + static_cast<uint64_t>(v));
  }
  Store(key, std::to_string(v));
  return v;
}

Status Keyspace::Append(const std::string& key, std::string_view value) {
  auto it = data_.find(key);
  if (it != data_.end() && it->second.size() + value.size() > max_value_bytes_) {
    return Status::InvalidArgument(fmt::format("APPEND would grow '{}' over the value limit", key));
  }
  std::string old;
  if (!watchers_.empty() && it != data_.end()) old = it->second;
  std::string& v = data_[key];
  v += value;
  if (!watchers_.empty()) TellWatchers(key, kWatchKeyAppended, old, v);
  WakeWaiters(key);
  listener_.Changed(key, v);
  return Status::OK();
}

bool Keyspace::Delete(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  std::string old = std::move(it->second);
  data_.erase(it);
  if (!watchers_.empty()) TellWatchers(key, kWatchKeyDeleted, old, "");
  return true;
}

bool Keyspace::AllExist(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const auto& k) { return Exists(k); });
}

bool Keyspace::Wait(uint64_t owner, std::vector<std::string>& keys) {
  auto w = std::make_shared<Waiter>();
  w->owner = owner;
  for (auto& k : keys) {
    if (!Exists(k)) {
      ++w->missing;
      waiters_[k].waiters.push_back(w);
      w->keys.push_back(std::move(k));
    }
  }
  if (w->missing == 0) return true;
  AddWaiter(std::move(w));
  return false;
}

void Keyspace::WaitForNext(uint64_t owner, const std::string& key) {
  auto w = std::make_shared<Waiter>();
  w->owner = owner;
  w->missing = 1;
  w->keys.push_back(key);
  waiters_[key].waiters.push_back(w);
  AddWaiter(std::move(w));
}

void Keyspace::AddWaiter(std::shared_ptr<Waiter> w) {
  ++live_waits_;
  waits_of_[w->owner].push_back(std::move(w));
}

Result<bool> Keyspace::Barrier(uint64_t owner, const std::string& key, int64_t world_size) {
  auto it = data_.find(key);
  int64_t count = 1;
  if (it != data_.end()) {
    auto cur = ParseInt(it->second);
    if (!cur) return Status::InvalidArgument(fmt::format("BARRIER on non-integer key '{}'", key));
    count = static_cast<int64_t>(static_cast<uint64_t>(*cur) + 1);
  }
  std::string& stored = data_[key];
  stored = std::to_string(count);
  listener_.Changed(key, stored);
  if (count >= world_size) {
    WakeWaiters(key);
    return true;
  }
  WaitForNext(owner, key);
  return false;
}

void Keyspace::Complete(const std::shared_ptr<Waiter>& w, bool by_push) {
  w->done = true;
  --live_waits_;
  if (auto it = waits_of_.find(w->owner); it != waits_of_.end()) {
    std::erase(it->second, w);
    if (it->second.empty()) waits_of_.erase(it);
  }
  listener_.WaitDone(w->owner, by_push);
}

void Keyspace::CancelWaits(uint64_t owner) {
  auto node = waits_of_.extract(owner);
  if (node.empty()) return;
  for (auto& w : node.mapped()) {
    if (w->done) continue;
    w->done = true;
    --live_waits_;
    for (const auto& key : w->keys) {
      auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;
      WaitList& list = it->second;
      if (++list.dead * 2 < list.waiters.size()) continue;
      std::erase_if(list.waiters, [](const auto& x) { return x->done; });
      list.dead = 0;
      if (list.waiters.empty()) waiters_.erase(it);
    }
  }
}

void Keyspace::Watch(uint64_t owner, const std::string& key) {
  watchers_[key].insert(owner);
  watched_by_[owner].push_back(key);
}

void Keyspace::Forget(uint64_t owner) {
  CancelWaits(owner);
  auto node = watched_by_.extract(owner);
  if (node.empty()) return;
  for (const auto& key : node.mapped()) {
    auto it = watchers_.find(key);
    if (it == watchers_.end()) continue;
    it->second.erase(owner);
    if (it->second.empty()) watchers_.erase(it);
  }
}

// A key appeared or changed: every WAIT that was missing it has one key
// fewer to wait for.
void Keyspace::WakeWaiters(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second.waiters);
  waiters_.erase(it);
  // Answering may drop a connection, which retires its waiters: they are
  // then marked done here and skipped; the list is ours, not the index's.
  for (auto& w : list) {
    if (w->done || --w->missing > 0) continue;
    Complete(w, false);
  }
}

void Keyspace::WakeOneWaiter(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& list = it->second.waiters;
  std::shared_ptr<Waiter> woken;
  size_t i = 0;
  while (i < list.size() && !woken) {
    auto& w = list[i++];
    if (w->done) continue;
    if (--w->missing == 0) woken = w;
  }
  list.erase(list.begin(), list.begin() + static_cast<ptrdiff_t>(i));
  it->second.dead = std::min(it->second.dead, list.size());
  if (list.empty()) waiters_.erase(it);
  // The index is settled before the answer, which may drop a connection.
  if (woken) Complete(woken, true);
}

void Keyspace::TellWatchers(const std::string& key, uint8_t event, std::string_view old_value,
                            std::string_view new_value) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  // Telling one may drop its connection and so change the set: copy it.
  std::vector<uint64_t> targets(it->second.begin(), it->second.end());
  listener_.Watched(targets, event, key, old_value, new_value);
}

void Keyspace::Push(const std::string& key, std::string item) {
  queues_[key].push_back(std::move(item));
  WakeOneWaiter(key);
}

int64_t Keyspace::Pop(const std::string& key, std::string* item) {
  auto it = queues_.find(key);
  if (it == queues_.end()) return 0;
  auto n = static_cast<int64_t>(it->second.size());
  *item = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return n;
}

int64_t Keyspace::QueueLength(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

size_t Keyspace::EraseAllBut(const std::string& keep_prefix) {
  auto gone = [&](const auto& kv) { return !kv.first.starts_with(keep_prefix); };
  return std::erase_if(data_, gone) + std::erase_if(queues_, gone);
}

void Keyspace::ForgetEveryone() {
  waiters_.clear();
  waits_of_.clear();
  watchers_.clear();
  watched_by_.clear();
  live_waits_ = 0;
}

size_t Keyspace::num_wait_index_entries() const {
  size_t n = 0;
  for (const auto& [key, list] : waiters_) n += list.waiters.size();
  return n;
}

}  // namespace trun::store
