#include "store/poller.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace trun::store {

Poller::~Poller() { Close(); }

Status Poller::Start(std::weak_ptr<void> alive, Ready ready) {
  int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) {
    return Status::IOError(
        fmt::format("cannot make an epoll instance for the clients' sockets: {}; raise the "
                    "open-file limit (ulimit -n) if it is reached",
                    std::strerror(errno)));
  }
  std::error_code ec;
  descriptor_.assign(fd, ec);
  if (ec) {
    ::close(fd);
    return Status::IOError(
        fmt::format("cannot wait on the clients' epoll instance: {}", ec.message()));
  }
  alive_ = std::move(alive);
  ready_ = std::move(ready);
  Wait();
  return Status::OK();
}

void Poller::Close() {
  std::error_code ec;
  descriptor_.close(ec);
  ready_ = nullptr;
}

void Poller::Wait() {
  descriptor_.async_wait(asio::posix::descriptor_base::wait_read,
                         [this, alive = alive_](std::error_code ec) {
                           if (ec || alive.expired()) return;
                           Round();
                         });
}

// asio watches the epoll instance edge-triggered, and an epoll instance
// that still holds ready sockets after a round need not signal again: so a
// round that found any ends by looking again, as a handler of its own so
// that timers and other work interleave, and only a round that finds none
// waits.
void Poller::Round() {
  auto keep = alive_.lock();
  if (!keep || !descriptor_.is_open()) return;
  std::array<epoll_event, 256> events;
  int n = epoll_wait(descriptor_.native_handle(), events.data(), events.size(), 0);
  if (n <= 0) return Wait();
  for (int i = 0; i < n && ready_; ++i) ready_(events[i].data.u64, events[i].events);
  if (!descriptor_.is_open()) return;
  asio::post(io_, [this, alive = alive_] {
    if (!alive.expired()) Round();
  });
}

Status Poller::Add(int fd, uint64_t id, uint32_t events) {
  return Control(EPOLL_CTL_ADD, fd, id, events);
}

Status Poller::Change(int fd, uint64_t id, uint32_t events) {
  return Control(EPOLL_CTL_MOD, fd, id, events);
}

Status Poller::Control(int op, int fd, uint64_t id, uint32_t events) {
  epoll_event e{};
  e.events = events;
  e.data.u64 = id;
  if (epoll_ctl(descriptor_.native_handle(), op, fd, &e) == 0) return Status::OK();
  return Status::IOError(fmt::format("cannot watch its socket: {}", std::strerror(errno)));
}

void Poller::Remove(int fd) {
  if (!descriptor_.is_open()) return;
  epoll_event e{};
  epoll_ctl(descriptor_.native_handle(), EPOLL_CTL_DEL, fd, &e);
}

}  // namespace trun::store
