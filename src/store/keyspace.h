// Keyspace: what a TCPStore holds and how its requests change it, with no
// socket in sight -- keys and values, ADD's counters, the queues, the WAITs
// still missing keys (with the index that wakes them), BARRIER's arrivals and
// WATCH_KEY's watchers. The server (server.h) parses requests, asks the
// admission rule, and calls one method here per request; what the keyspace
// decides for other clients (a WAIT answered, a watcher told of a change, a
// key changed for the rendezvous's observer) it reports to its
// KeyspaceListener, which the server turns into bytes on their sockets.
//
// Clients are named by an owner id (the server's connection id; 0 for the
// server's own local calls). An owner's WAITs and watches are kept until
// they are answered, it cancels them (CancelWaits) or it goes (Forget).
//
// A listener may call CancelWaits or Forget from any of its callbacks (a
// reply that overflows a connection makes the server drop it, and so forget
// its owner, in the middle of a wake-up), but must not change keys. Every
// method is written for that: the lists it walks are its own copies, and a
// waiter retired meanwhile is skipped.
//
// Thread-safety: none; one thread (the server's event loop) owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"

namespace trun::store {

class KeyspaceListener {
 public:
  virtual ~KeyspaceListener() = default;
  // One WAIT (or early BARRIER arrival) of `owner` has every key it waited
  // for: answer it with kWaitStopWaiting. Once per WAIT, in the order the
  // keyspace completes them. `by_push`: a QUEUE_PUSH completed it, whose
  // one item serves this waiter alone (a relay's shared WAIT, relay.h,
  // releases one of its local waiters for it, not all).
  virtual void WaitDone(uint64_t owner, bool by_push) = 0;
  // WATCH_KEY: `key` changed as `event` (kWatchKey*) says, from `old_value`
  // to `new_value`; `watchers` registered on it. Called before the change's
  // own waiters are woken.
  virtual void Watched(const std::vector<uint64_t>& watchers, uint8_t event, const std::string& key,
                       std::string_view old_value, std::string_view new_value) = 0;
  // `key` now holds `value` (SET, ADD, COMPARE_SET that set, APPEND,
  // MULTI_SET, BARRIER's count), after its waiters were woken.
  virtual void Changed(const std::string& key, const std::string& value) = 0;
};

class Keyspace {
 public:
  // `max_value_bytes`: the largest value APPEND may grow a key to.
  Keyspace(KeyspaceListener& listener, size_t max_value_bytes);
  Keyspace(const Keyspace&) = delete;
  Keyspace& operator=(const Keyspace&) = delete;

  // GET, without waiting: nullptr when `key` is not set.
  const std::string* Find(const std::string& key) const;
  // SET: creates or replaces, tells watchers, wakes the key's waiters.
  void Set(const std::string& key, std::string value);
  // COMPARE_SET as torch's servers do it: a missing key is set only where
  // `expected` is "" (else `expected` comes back); a present one is set
  // where it holds `expected`. Returns what the key holds afterwards.
  std::string CompareSet(const std::string& key, const std::string& expected, std::string desired);
  // ADD: the key's decimal count plus `delta` (wrapping as torch's do), or
  // `delta` where it is unset. InvalidArgument, changing nothing, where it
  // holds something other than an integer.
  Result<int64_t> Add(const std::string& key, int64_t delta);
  // APPEND: InvalidArgument, changing nothing, where it would grow the
  // value over the limit.
  Status Append(const std::string& key, std::string_view value);
  // DELETE_KEY: whether it was there. Tells watchers; wakes nobody.
  bool Delete(const std::string& key);
  // CHECK: whether every key exists (a queue with items counts as one).
  bool AllExist(const std::vector<std::string>& keys) const;
  // WAIT: true when every key exists already (answer now); otherwise a
  // waiter of `owner` is kept for the missing ones, and WaitDone reports
  // it. Moves the missing keys out of `keys`.
  bool Wait(uint64_t owner, std::vector<std::string>& keys);
  // BARRIER, as torch's servers do it: the key holds a count of arrivals
  // as decimal ASCII, as ADD keeps it. The arrival that brings it to
  // `world_size` returns true (answer it now) and wakes every waiter of
  // the key; an earlier one waits on the key like a WAIT and returns false,
  // and is answered by that wake-up (or by a SET of the key, as in torch,
  // where the two share one index). The earlier arrivals wake nobody: a
  // WAIT on the key itself would otherwise release the barrier's own
  // waiters. InvalidArgument, changing nothing, where the key holds
  // something other than an integer.
  Result<bool> Barrier(uint64_t owner, const std::string& key, int64_t world_size);
  // A WAIT of `owner` on `key` that only the key's next change or push
  // answers, whether or not the key exists now: what is left of a relay's
  // shared WAIT (relay.h) once a push has served one of the waiters it
  // stands for, and the others keep waiting, as they would on the store.
  void WaitForNext(uint64_t owner, const std::string& key);
  // CANCEL_WAIT: `owner`'s WAITs will never be answered.
  void CancelWaits(uint64_t owner);
  // WATCH_KEY: `owner` hears of every later change of `key`.
  void Watch(uint64_t owner, const std::string& key);
  // `owner` is gone: its WAITs and watches with it.
  void Forget(uint64_t owner);

  // QUEUE_PUSH: appends, and completes the first waiter of the key that
  // this completes (one item can satisfy one blocking pop, as in torch).
  void Push(const std::string& key, std::string item);
  // QUEUE_POP: the number of items before the pop, and the first item if
  // there was one.
  int64_t Pop(const std::string& key, std::string* item);
  // QUEUE_LEN.
  int64_t QueueLength(const std::string& key) const;

  // GETNUMKEYS / LIST_KEYS: the keys (queues not), in no particular order
  // (torch's servers walk their hash map too); `hidden` leaves some out.
  template <typename Hidden>
  size_t CountKeys(Hidden hidden) const {
    size_t n = 0;
    for (const auto& kv : data_) n += hidden(kv.first) ? 0 : 1;
    return n;
  }
  template <typename Fn>
  void ForEachKey(Fn fn) const {
    for (const auto& kv : data_) fn(kv.first);
  }

  // Erases every key and queue whose name does not start with
  // `keep_prefix`, without waking or telling anyone; returns how many.
  size_t EraseAllBut(const std::string& keep_prefix);
  // Drops every waiter and watcher without answering them (the server is
  // closing).
  void ForgetEveryone();

  size_t num_keys() const { return data_.size(); }
  // WAITs not yet answered, cancelled or forgotten; and the entries of the
  // key -> waiters index (which a cancel may leave behind for a while, but
  // never unboundedly).
  size_t num_waits() const { return live_waits_; }
  size_t num_wait_index_entries() const;

 private:
  // One WAIT still missing some of its keys. It sits in the index under
  // each key it misses, and in its owner's list, until it is answered,
  // cancelled or its owner goes.
  struct Waiter {
    uint64_t owner = 0;
    std::vector<std::string> keys;  // the keys it missed on arrival
    size_t missing = 0;
    bool done = false;
  };
  // The waiters of one key. Cancelled waiters are not searched for and
  // erased one by one (a WAIT of 100K ranks on one key, all cancelled,
  // would be quadratic); they are counted, and the list is compacted when
  // half of it is dead, which keeps both time and memory linear.
  struct WaitList {
    std::vector<std::shared_ptr<Waiter>> waiters;
    size_t dead = 0;
  };

  bool Exists(const std::string& key) const;
  // Replaces the value, telling watchers first, then waking and telling
  // the listener.
  void Store(const std::string& key, std::string value);
  void Complete(const std::shared_ptr<Waiter>& w, bool by_push);
  void WakeWaiters(const std::string& key);
  void WakeOneWaiter(const std::string& key);
  void TellWatchers(const std::string& key, uint8_t event, std::string_view old_value,
                    std::string_view new_value);
  void AddWaiter(std::shared_ptr<Waiter> w);

  KeyspaceListener& listener_;
  const size_t max_value_bytes_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, WaitList> waiters_;
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<Waiter>>> waits_of_;  // by owner
  std::unordered_map<std::string, std::unordered_set<uint64_t>> watchers_;
  std::unordered_map<uint64_t, std::vector<std::string>> watched_by_;  // by owner
  size_t live_waits_ = 0;
};

}  // namespace trun::store
