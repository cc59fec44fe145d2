#include "store/server_thread.h"

#include <future>

namespace trun::store {

Result<std::unique_ptr<StoreServerThread>> StoreServerThread::Start(ServerOptions options) {
  std::unique_ptr<StoreServerThread> t(new StoreServerThread());
  auto server = StoreServer::Start(t->io_, std::move(options));
  if (!server.ok()) return server.status();
  t->server_ = std::move(*server);
  t->port_ = t->server_->port();
  t->work_.emplace(t->io_.get_executor());
  t->thread_ = std::thread([io = &t->io_] { io->run(); });
  return t;
}

StoreServerThread::~StoreServerThread() {
  if (!thread_.joinable()) return;  // Start failed
  // The server is destroyed on its own thread, where its handlers run; the
  // loop then finishes what the closed sockets left queued and returns.
  asio::post(io_, [this] { server_.reset(); });
  work_.reset();
  thread_.join();
}

void StoreServerThread::RunOnLoop(const std::function<void(StoreServer&)>& fn) {
  std::promise<void> done;
  asio::post(io_, [&] {
    fn(*server_);
    done.set_value();
  });
  done.get_future().wait();
}

}  // namespace trun::store
