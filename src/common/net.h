// Host names and ports as the launcher needs them.
// Thread-safety: pure functions over the OS's resolver.
#pragma once

#include <string>

#include "common/status.h"

namespace trun {

// This host's fully qualified name, chosen as Python's socket.getfqdn() does
// (torchrun puts that in MASTER_ADDR and in the failure table).
std::string FqdnHostname();

// A TCP port held for the life of the job. The socket is bound with
// SO_REUSEADDR but never listens: nothing else can take the port, yet the
// worker that hosts torch's store (which also sets SO_REUSEADDR) can bind and
// listen on it, attempt after attempt. This is what makes restarts immune to
// EADDRINUSE and closes the bind-0-then-close race.
class PortReservation {
 public:
  // port 0 picks a free one.
  static Result<PortReservation> Reserve(int port);
  PortReservation(PortReservation&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  PortReservation& operator=(PortReservation&&) = delete;
  ~PortReservation();
  int port() const { return port_; }

 private:
  PortReservation(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

}  // namespace trun
