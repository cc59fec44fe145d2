#include "common/acceptor.h"

#include "common/log.h"
#include "common/net.h"

namespace trun {

using asio::ip::tcp;

Acceptor::Acceptor(asio::io_context& io, Options options, Callbacks callbacks)
    : io_(io),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      acceptor_(io),
      retry_(io) {}

Result<std::shared_ptr<Acceptor>> Acceptor::Listen(asio::io_context& io, Options options,
                                                   Callbacks callbacks) {
  std::shared_ptr<Acceptor> a(new Acceptor(io, std::move(options), std::move(callbacks)));
  TRUN_RETURN_IF_ERROR(
      ListenTcp(a->acceptor_, a->options_.host, a->options_.port, a->options_.what));
  a->port_ = a->acceptor_.local_endpoint().port();
  // TakeWaiting's accepts must fail rather than wait once the backlog is
  // empty.
  std::error_code ec;
  a->acceptor_.non_blocking(true, ec);
  a->Accept();
  return a;
}

void Acceptor::Close() {
  std::error_code ec;
  acceptor_.close(ec);
  retry_.cancel();
  callbacks_ = Callbacks();
}

void Acceptor::Accept() {
  acceptor_.async_accept(
      io_.get_executor(), peer_, [self = shared_from_this()](std::error_code ec, Socket s) {
        if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
        if (!ec) {
          self->out_of_descriptors_ = false;
          self->Take(std::move(s));
          self->TakeWaiting();
          if (self->acceptor_.is_open()) self->Accept();
          return;
        }
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
            ec == asio::error::no_memory) {
          // The pending client stays in the backlog; accepting again at once
          // would spin. Wait for a client to leave, log once per episode.
          if (!self->out_of_descriptors_) {
            log::Warning("{}: cannot accept a client: {}; raise the open-file limit (ulimit -n)",
                         self->options_.what, ec.message());
            self->out_of_descriptors_ = true;
          }
          self->retry_.expires_after(std::chrono::milliseconds(100));
          self->retry_.async_wait([self](std::error_code e) {
            if (!e && self->acceptor_.is_open()) self->Accept();
          });
          return;
        }
        self->Accept();  // e.g. a client that reset before we accepted it
      });
}

// In a storm of connects, the clients already in the backlog are taken in
// the same turn, up to kBatch of them, rather than each after a trip
// through the event loop. Any error, running out of waiting clients
// included, ends the batch: the asynchronous accept that follows meets it
// again and handles it.
void Acceptor::TakeWaiting() {
  for (int i = 0; i < kBatch && acceptor_.is_open(); ++i) {
    Socket s(io_);
    std::error_code ec;
    acceptor_.accept(s, peer_, ec);
    if (ec) return;
    Take(std::move(s));
  }
}

void Acceptor::Take(Socket client) {
  auto peer = Unmapped(peer_.address());
  if (callbacks_.admit && !callbacks_.admit(peer)) return;
  if (callbacks_.open() >= options_.max_connections && !callbacks_.make_room()) {
    callbacks_.refuse(client, peer);
    return;
  }
  callbacks_.serve(std::move(client), peer);
}

}  // namespace trun
