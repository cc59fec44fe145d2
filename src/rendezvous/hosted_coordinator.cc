#include "rendezvous/hosted_coordinator.h"

namespace trun::rendezvous {

HostedCoordinator::HostedCoordinator(asio::io_context& io, CoordinatorOptions options, Writer write)
    : coordinator_(std::move(options), Clock::now()),
      write_(std::move(write)),
      timer_(io),
      settle_timer_(io) {
  Apply();
}

void HostedCoordinator::OnKey(uint64_t conn, std::string_view key, std::string_view value) {
  coordinator_.OnKey(conn, key, value, Clock::now());
  Apply();
}

void HostedCoordinator::OnDisconnect(uint64_t conn) {
  coordinator_.OnDisconnect(conn, Clock::now());
  Apply();
}

void HostedCoordinator::OnNodeGone(int64_t seq, const std::string& why) {
  coordinator_.OnNodeGone(seq, why, Clock::now());
  Apply();
}

void HostedCoordinator::WhenSettled(Duration limit, std::function<void()> then) {
  settled_ = std::move(then);
  settle_timer_.expires_after(limit);
  settle_timer_.async_wait([this](std::error_code ec) {
    if (!ec) Settle();
  });
  Apply();
}

void HostedCoordinator::Settle() {
  if (!settled_) return;
  settle_timer_.cancel();
  asio::post(settle_timer_.get_executor(), std::move(settled_));
  settled_ = nullptr;
}

// Makes the coordinator's writes and sets the timer to its next deadline.
void HostedCoordinator::Apply() {
  // Lingering serves the nodes only while one is alive to read how the job
  // ended, or while a failure waits to be judged; a job that goes on needs
  // a new host, not this one.
  if (settled_ &&
      (coordinator_.live_nodes() == 0 || (!coordinator_.over() && !coordinator_.judging()))) {
    Settle();
  }
  for (const auto& w : coordinator_.TakeWrites()) write_(w);
  auto next = coordinator_.NextDeadline();
  if (next == armed_) return;
  armed_ = next;
  timer_.cancel();
  if (!next) return;
  timer_.expires_at(*next);
  timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    armed_.reset();
    coordinator_.OnTimer(Clock::now());
    Apply();
  });
}

}  // namespace trun::rendezvous
