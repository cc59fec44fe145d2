#include "store/pressure_guard.h"

#include <utility>

namespace trun::store {

PressureGuard::PressureGuard(asio::io_context& io, std::string host, size_t max_partial_bytes,
                             size_t max_queued_reply_bytes, Close close)
    : host_(std::move(host)),
      max_queued_reply_bytes_(max_queued_reply_bytes),
      close_(std::move(close)),
      partial_(max_partial_bytes),
      replies_(max_queued_reply_bytes),
      sweep_(io) {}

void PressureGuard::Stop() {
  alive_.reset();
  sweep_.cancel();
}

void PressureGuard::AfterRead(uint64_t conn, size_t arrived, size_t held) {
  partial_.Update(conn, arrived, held, Clock::now());
  partial_.CloseOverBudget(
      [&](uint64_t victim) { close_(victim, partial_.OverBudgetReason(host_)); });
  CloseUnreadOverBudget();
  if (!sweep_armed_ && Unsettled()) Sweep();
}

void PressureGuard::RepliesQueued(uint64_t conn, size_t queued, bool drained) {
  replies_.Update(conn, queued, drained, Clock::now());
  if (!sweep_armed_ && Unsettled()) Sweep();
}

void PressureGuard::Remove(uint64_t conn) {
  partial_.Remove(conn);
  replies_.Remove(conn);
}

void PressureGuard::CloseUnreadOverBudget() {
  replies_.CloseOverBudget(
      Clock::now(), [&](uint64_t victim) { close_(victim, replies_.OverBudgetReason(host_)); });
}

bool PressureGuard::Unsettled() const {
  return partial_.size() > 0 || replies_.total() > max_queued_reply_bytes_;
}

void PressureGuard::Sweep() {
  if (!alive_) return;
  sweep_armed_ = true;
  sweep_.expires_after(std::chrono::seconds(1));
  sweep_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](std::error_code ec) {
    if (ec || alive.expired()) return;
    sweep_armed_ = false;
    partial_.CloseStalled(Clock::now(),
                          [&](uint64_t id) { close_(id, PartialRequests::StalledReason()); });
    CloseUnreadOverBudget();
    if (Unsettled()) Sweep();
  });
}

}  // namespace trun::store
