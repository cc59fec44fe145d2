// Poller: one epoll instance that watches every client socket of a host
// (the store, a relay) and that the io_context waits on as one descriptor.
//
// Why not asio's sockets: asio keeps about 170 bytes of state for each
// socket it knows and allocates about 100 more for each operation pending
// on one, and an idle connection always has a read pending. A store holds
// thousands of idle connections; in an epoll set of our own each costs a
// registration, which is kernel memory, and its Connection object alone.
//
// Sockets are watched level-triggered: a connection that leaves bytes
// unread (to let the others have their turn) is reported again at the next
// round.
//
// Thread-safety: every method, and the handler, runs on the io_context's
// one thread.
#pragma once

#include <sys/epoll.h>

#include <asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"

namespace trun::store {

class Poller {
 public:
  // What Start's handler is told: the id a socket was added with, and its
  // epoll events (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP).
  using Ready = std::function<void(uint64_t id, uint32_t events)>;

  explicit Poller(asio::io_context& io) : io_(io), descriptor_(io) {}
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Opens the epoll instance and waits on it, running `ready` for each
  // event, until Close(). `ready` runs only while `alive` does: the
  // owner's life, which a handler still queued may outlast.
  Status Start(std::weak_ptr<void> alive, Ready ready);
  // Stops waiting (`ready` is not run again) and closes the epoll instance.
  void Close();

  // Watches `fd` for `events` (EPOLLIN, EPOLLOUT, both or none), reported
  // with `id`: Add a socket not yet watched, Change one that is. A socket
  // leaves the set when it is closed; Remove takes it out before.
  Status Add(int fd, uint64_t id, uint32_t events);
  Status Change(int fd, uint64_t id, uint32_t events);
  void Remove(int fd);

  asio::io_context& io() { return io_; }

 private:
  void Wait();
  Status Control(int op, int fd, uint64_t id, uint32_t events);
  // One round: every event ready now; false when the owner is gone.
  void Round();

  asio::io_context& io_;
  asio::posix::stream_descriptor descriptor_;
  std::weak_ptr<void> alive_;
  Ready ready_;
};

}  // namespace trun::store
