// PressureGuard: pressure.h's rules applied to one host's connections (the
// store's, or a relay's clients): the budgets over unfinished requests and
// over replies left unread, judged after each read, and a sweep about once
// a second while a request is unfinished or the unread replies are over
// their budget (the rate floor, and the unread replies' second). It closes
// connections through its host's callback, never in the middle of a
// request: the host calls AfterRead at a read's end, and RepliesQueued
// only books.
//
// Thread-safety: none; every method, and its sweep, on the host's loop.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "store/pressure.h"

namespace trun::store {

class PressureGuard {
 public:
  // `host` names the host in the reasons ("the store"); `close` closes a
  // connection (which may be gone already) with a reason for the log.
  using Close = std::function<void(uint64_t conn, const std::string& why)>;
  PressureGuard(asio::io_context& io, std::string host, size_t max_partial_bytes,
                size_t max_queued_reply_bytes, Close close);
  PressureGuard(const PressureGuard&) = delete;
  PressureGuard& operator=(const PressureGuard&) = delete;

  // `conn` received `arrived` bytes, after which its unfinished request
  // holds `held`: closes connections while either budget is exceeded.
  void AfterRead(uint64_t conn, size_t arrived, size_t held);
  // Connection::Book's news: only booked here.
  void RepliesQueued(uint64_t conn, size_t queued, bool drained);
  // `conn` closed.
  void Remove(uint64_t conn);
  // No sweep after this.
  void Stop();

  size_t queued_reply_bytes() const { return replies_.total(); }

 private:
  void CloseUnreadOverBudget();
  bool Unsettled() const;
  void Sweep();

  std::string host_;
  size_t max_queued_reply_bytes_;
  Close close_;
  PartialRequests partial_;
  QueuedReplies replies_;
  asio::steady_timer sweep_;
  bool sweep_armed_ = false;
  // Reset by Stop; the sweep's handler may run after that, or after this
  // guard is gone (with an error): it finds this expired and touches
  // nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace trun::store
