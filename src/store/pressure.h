// Pressure: what clients that never finish, or that fail in a loop, may
// make the store hold and log. Pure bookkeeping, kept apart from the
// server's sockets so that its rules are unit-tested with made-up clocks.
//
// - PartialRequests: every connection's request that is not whole yet (its
//   bytes are in the parser, its end is not). A request's keys are judged
//   as soon as they are parsed (admission.h), so a client without the job
//   token never gets a value buffered under trun's keys; what is left is a
//   worker's key, which any local process may write by design, and two
//   rules bound what such requests hold:
//   * a budget over all connections (ServerOptions::max_partial_bytes): over
//     it, the connection whose request has gone longest without a byte is
//     closed, one at a time until the total is under it again. A request
//     that streams in is never the one chosen while another stalls.
//   * a rate floor: a request that is not whole must receive at least
//     kPartialFloorBytes in every kPartialWindow it stays incomplete, and
//     some byte in the last kPartialWindow, or its connection is closed.
//     64 KiB per 10 s is 6.4 KiB/s, slower than any link a job trains over,
//     so a worker's large SET over a slow link goes through, while a client
//     that starts a request and trickles it (one byte a second), or sends
//     most of it and stops, is closed within about 10 s.
// - QueuedReplies: replies queued for clients that do not read them. One
//   connection may queue ServerOptions::max_pending_reply_bytes; a budget
//   over all connections (max_queued_reply_bytes) bounds the rest: over
//   it, of the connections whose replies have sat kReplyStall without any
//   write of theirs ending (a reader of a burst of large replies drains
//   them within it), the one that holds the most is closed, one at a time
//   until the total is under it again; over twice the budget, the one that
//   holds the most at once. A client that asks for many replies and reads
//   none holds more than one that reads what it asked for. Only queues of
//   kBookedReplyBytes or more are booked: small replies, nearly all of
//   them, cost the bookkeeping nothing.
// - RefusalLimiter: refusals are logged at most once a period per source
//   address and reason. Its table is bounded without losing the limit:
//   full of sources seen within the period, every further source shares
//   one entry, so an attacker with many addresses (loopback has
//   127.0.0.0/8) gets one more line a period, and resets nobody's limit.
//
// Thread-safety: none; each object is used by its server's one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trun::store {

using Clock = std::chrono::steady_clock;

inline constexpr auto kPartialWindow = std::chrono::seconds(10);
inline constexpr size_t kPartialFloorBytes = 64 * 1024;

class PartialRequests {
 public:
  explicit PartialRequests(size_t budget) : budget_(budget) {}

  // `conn` received `arrived` bytes at `now` (0: none, as at accept), after
  // which its unfinished request holds `held` bytes (0: none is
  // unfinished; its entry is dropped).
  void Update(uint64_t conn, size_t arrived, size_t held, Clock::time_point now);
  // `conn` closed.
  void Remove(uint64_t conn);

  // While the total held is over the budget: the connection whose request
  // has gone longest without a byte (the caller closes it, Removes it, and
  // asks again). nullopt at or under the budget.
  std::optional<uint64_t> OverBudget() const;
  // Closes (`close(conn)`, which may find it gone already) and Removes the
  // connections OverBudget names until the total is under the budget.
  template <typename Close>
  void CloseOverBudget(Close close) {
    while (auto victim = OverBudget()) {
      close(*victim);
      Remove(*victim);
    }
  }
  // The connections whose request received fewer than kPartialFloorBytes
  // in a whole window, or nothing for a window; every other request's
  // window that has run out starts again at `now`. Called about once a
  // second.
  std::vector<uint64_t> Stalled(Clock::time_point now);
  // Closes (`close(conn)`, which may find it gone already) and Removes the
  // Stalled connections.
  template <typename Close>
  void CloseStalled(Clock::time_point now, Close close) {
    for (uint64_t conn : Stalled(now)) {
      close(conn);
      Remove(conn);
    }
  }
  // Why a connection was closed, for the log: over the budget of `host`
  // ("the store"), or under the rate floor.
  std::string OverBudgetReason(std::string_view host) const;
  static std::string StalledReason();

  size_t total() const { return total_; }
  size_t size() const { return by_conn_.size(); }

 private:
  struct Entry {
    size_t held = 0;
    Clock::time_point last_byte;
    Clock::time_point window_start;
    size_t window_bytes = 0;
  };
  size_t budget_;
  size_t total_ = 0;
  std::unordered_map<uint64_t, Entry> by_conn_;
  // (last byte, connection): the first is the one to close over budget.
  std::set<std::pair<Clock::time_point, uint64_t>> by_last_byte_;
};

inline constexpr auto kReplyStall = std::chrono::seconds(1);
inline constexpr size_t kBookedReplyBytes = 64 * 1024;

class QueuedReplies {
 public:
  explicit QueuedReplies(size_t budget) : budget_(budget) {}

  // `conn` has `queued` reply bytes queued at `now` (0: none; its entry is
  // dropped); `drained`: some of its replies reached its socket since.
  void Update(uint64_t conn, size_t queued, bool drained, Clock::time_point now);
  void Remove(uint64_t conn);

  // Closes (`close(conn)`, which may find it gone already) and Removes the
  // connections that the rule above names at `now`.
  template <typename Close>
  void CloseOverBudget(Clock::time_point now, Close close) {
    while (auto victim = OverBudget(now)) {
      close(*victim);
      Remove(*victim);
    }
  }
  std::optional<uint64_t> OverBudget(Clock::time_point now) const;
  std::string OverBudgetReason(std::string_view host) const;

  size_t total() const { return total_; }
  size_t size() const { return by_conn_.size(); }

 private:
  struct Entry {
    size_t queued = 0;
    Clock::time_point since;  // booked, or last drained
  };
  size_t budget_;
  size_t total_ = 0;
  std::unordered_map<uint64_t, Entry> by_conn_;
  std::set<std::pair<size_t, uint64_t>, std::greater<>> by_queued_;  // most first
};

class RefusalLimiter {
 public:
  explicit RefusalLimiter(size_t max_sources = 4096,
                          Clock::duration period = std::chrono::minutes(1))
      : max_sources_(max_sources), period_(period) {}

  struct Decision {
    bool log = false;
    // Refusals of the same entry that were not logged since its last line.
    uint64_t unlogged = 0;
    // The table was full: the entry is the one all further sources share.
    bool pooled = false;
  };
  // A refusal from `source` for `reason` at `now`.
  Decision Note(std::string_view source, std::string_view reason, Clock::time_point now);
  // The same, as the line to log: `line` with what went unlogged since,
  // or nothing where this refusal is not to be logged.
  std::optional<std::string> Line(std::string_view source, std::string_view reason,
                                  std::string_view line, Clock::time_point now);

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Clock::time_point logged;
    uint64_t unlogged = 0;
  };
  Decision Count(Entry& e, bool fresh, Clock::time_point now);

  size_t max_sources_;
  Clock::duration period_;
  std::unordered_map<std::string, Entry> entries_;  // by "source reason"
  Entry pool_;
  bool pool_used_ = false;
  // Full: entries whose period ran out are swept at most once a second, so
  // a flood of new sources costs no scan per refusal.
  Clock::time_point next_sweep_;
};

}  // namespace trun::store
