// HostedCoordinator: a Coordinator run on an event loop, with a timer for
// its deadlines and a writer for its answers; what every medium's host
// runs, whatever brings it the nodes' messages.
//
// Thread-safety: every method on the loop's thread.
#pragma once

#include <asio.hpp>
#include <functional>
#include <optional>
#include <string_view>

#include "rendezvous/coordinator.h"

namespace trun::rendezvous {

class HostedCoordinator {
 public:
  // `write` makes one of the coordinator's writes in the medium.
  using Writer = std::function<void(const Write&)>;
  HostedCoordinator(asio::io_context& io, CoordinatorOptions options, Writer write);
  HostedCoordinator(const HostedCoordinator&) = delete;
  HostedCoordinator& operator=(const HostedCoordinator&) = delete;

  void OnKey(uint64_t conn, std::string_view key, std::string_view value);
  void OnDisconnect(uint64_t conn);
  void OnNodeGone(int64_t seq, const std::string& why);
  // `then` runs (posted) once the job is over and no node is alive any more
  // (each has left, disconnected or gone silent), or after `limit`; at once
  // if the job is not over: then the nodes need a new host, not this one.
  // A round's failure still being judged is waited for first: it may end
  // the job, and the nodes must hear so from this host, which knows of it.
  void WhenSettled(Duration limit, std::function<void()> then);

 private:
  void Apply();
  void Settle();

  Coordinator coordinator_;
  Writer write_;
  asio::steady_timer timer_;
  std::optional<Clock::time_point> armed_;
  std::function<void()> settled_;
  asio::steady_timer settle_timer_;
};

}  // namespace trun::rendezvous
