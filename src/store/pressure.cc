#include "store/pressure.h"

#include <fmt/format.h>

#include <algorithm>

namespace trun::store {

void PartialRequests::Update(uint64_t conn, size_t arrived, size_t held, Clock::time_point now) {
  auto it = by_conn_.find(conn);
  if (held == 0) {
    if (it != by_conn_.end()) Remove(conn);
    return;
  }
  if (it == by_conn_.end()) {
    // A request begins: its first window starts now, with what came.
    it = by_conn_.emplace(conn, Entry{0, now, now, 0}).first;
  } else {
    total_ -= it->second.held;
    by_last_byte_.erase({it->second.last_byte, conn});
  }
  Entry& e = it->second;
  e.held = held;
  total_ += held;
  if (arrived > 0) {
    e.last_byte = now;
    e.window_bytes += arrived;
  }
  by_last_byte_.insert({e.last_byte, conn});
}

void PartialRequests::Remove(uint64_t conn) {
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return;
  total_ -= it->second.held;
  by_last_byte_.erase({it->second.last_byte, conn});
  by_conn_.erase(it);
}

std::optional<uint64_t> PartialRequests::OverBudget() const {
  if (total_ <= budget_ || by_last_byte_.empty()) return std::nullopt;
  return by_last_byte_.begin()->second;
}

std::string PartialRequests::OverBudgetReason(std::string_view host) const {
  return fmt::format(
      "unfinished requests held more than {}'s budget of {} bytes, and this client's waited "
      "longest for its next byte",
      host, budget_);
}

std::string PartialRequests::StalledReason() {
  return fmt::format(
      "its unfinished request got under {} bytes in {} s, the floor for a request that is not "
      "whole",
      kPartialFloorBytes, kPartialWindow.count());
}

std::vector<uint64_t> PartialRequests::Stalled(Clock::time_point now) {
  std::vector<uint64_t> out;
  for (auto& [conn, e] : by_conn_) {
    if (now - e.last_byte >= kPartialWindow) {
      out.push_back(conn);
      continue;
    }
    if (now - e.window_start < kPartialWindow) continue;
    if (e.window_bytes < kPartialFloorBytes) {
      out.push_back(conn);
    } else {
      e.window_start = now;
      e.window_bytes = 0;
    }
  }
  return out;
}

void QueuedReplies::Update(uint64_t conn, size_t queued, bool drained, Clock::time_point now) {
  if (queued == 0) return Remove(conn);
  auto [it, added] = by_conn_.try_emplace(conn, Entry{0, now});
  Entry& e = it->second;
  if (!added) {
    total_ -= e.queued;
    by_queued_.erase({e.queued, conn});
    if (drained) e.since = now;
  }
  e.queued = queued;
  total_ += queued;
  by_queued_.insert({e.queued, conn});
}

void QueuedReplies::Remove(uint64_t conn) {
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return;
  total_ -= it->second.queued;
  by_queued_.erase({it->second.queued, conn});
  by_conn_.erase(it);
}

std::optional<uint64_t> QueuedReplies::OverBudget(Clock::time_point now) const {
  if (total_ <= budget_ || by_queued_.empty()) return std::nullopt;
  if (total_ > 2 * budget_) return by_queued_.begin()->second;
  for (const auto& [queued, conn] : by_queued_) {
    if (now - by_conn_.at(conn).since >= kReplyStall) return conn;
  }
  return std::nullopt;
}

std::string QueuedReplies::OverBudgetReason(std::string_view host) const {
  return fmt::format(
      "replies queued for clients that do not read them held more than {}'s budget of {} bytes, "
      "and this client's unread replies were the most",
      host, budget_);
}

RefusalLimiter::Decision RefusalLimiter::Count(Entry& e, bool fresh, Clock::time_point now) {
  if (!fresh && now - e.logged < period_) {
    ++e.unlogged;
    return {};
  }
  Decision d{true, e.unlogged, false};
  e.logged = now;
  e.unlogged = 0;
  return d;
}

RefusalLimiter::Decision RefusalLimiter::Note(std::string_view source, std::string_view reason,
                                              Clock::time_point now) {
  std::string key = std::string(source) + " " + std::string(reason);
  if (auto it = entries_.find(key); it != entries_.end()) return Count(it->second, false, now);
  if (entries_.size() >= max_sources_ && now >= next_sweep_) {
    // An entry whose period ran out would log its next refusal anyway:
    // forgetting it loses no limit (only its count of unlogged ones).
    std::erase_if(entries_, [&](const auto& kv) { return now - kv.second.logged >= period_; });
    next_sweep_ = now + std::chrono::seconds(1);
  }
  if (entries_.size() < max_sources_) {
    return Count(entries_.emplace(std::move(key), Entry{}).first->second, true, now);
  }
  Decision d = Count(pool_, !std::exchange(pool_used_, true), now);
  d.pooled = true;
  return d;
}

std::optional<std::string> RefusalLimiter::Line(std::string_view source, std::string_view reason,
                                                std::string_view line, Clock::time_point now) {
  Decision d = Note(source, reason, now);
  if (!d.log) return std::nullopt;
  if (d.pooled) {
    return fmt::format(
        "{} (refused sources are too many to log each: {} more from them since the last such "
        "line)",
        line, d.unlogged);
  }
  if (d.unlogged > 0)
    return fmt::format("{} (and {} more from it since the last such line)", line, d.unlogged);
  return std::string(line);
}

}  // namespace trun::store
