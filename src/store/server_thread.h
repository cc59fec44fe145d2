// StoreServerThread: a StoreServer (server.h) on an io_context and thread
// of its own.
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "common/status.h"
#include "store/server.h"

namespace trun::store {

// A StoreServer on an io_context and thread of its own, for `trun store`,
// tests and tools; the agent hosts the server on its own loop instead.
// Destroying it stops the loop and joins the thread.
//
// Thread-safety: port() is fixed at start; RunOnLoop posts to the server's
// thread and waits, so it may be called from any thread but that one.
class StoreServerThread {
 public:
  static Result<std::unique_ptr<StoreServerThread>> Start(ServerOptions options);
  ~StoreServerThread();
  StoreServerThread(const StoreServerThread&) = delete;
  StoreServerThread& operator=(const StoreServerThread&) = delete;

  int port() const { return port_; }
  // Runs fn on the server's thread and waits for it.
  void RunOnLoop(const std::function<void(StoreServer&)>& fn);

 private:
  StoreServerThread() = default;
  asio::io_context io_{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::unique_ptr<StoreServer> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace trun::store
