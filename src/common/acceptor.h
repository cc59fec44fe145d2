// Acceptor: the accept loop of trun's TCP servers (the store, the agent's
// health server). It listens, takes each new client and asks its server's
// callbacks, in order: whether to serve a client from that address at all,
// whether there is room under the connection cap (else whether an open
// connection gives way to it), and finally to serve it.
//
// In a storm of connects it takes up to 64 waiting clients per turn of the
// event loop, each with the address accept gave (no getpeername).
//
// Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM), accepting again at
// once would spin, as the waiting client stays in the backlog: the loop
// waits 100 ms and tries again, with one log line per episode.
//
// Thread-safety: every method, and every callback, runs on the io_context's
// one thread. The callbacks are never called after Close().
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace trun {

class Acceptor : public std::enable_shared_from_this<Acceptor> {
 public:
  // A client's socket, bound to the io_context's own executor rather than
  // asio's type-erased any_io_executor: 8 bytes instead of 56, in the
  // socket and in every operation pending on it, which is most of what an
  // idle connection costs a server with thousands (it converts to a
  // tcp::socket where that is wanted).
  using Socket = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;
  struct Options {
    // As ListenTcp (net.h) takes them; `what` names the server in errors
    // and log lines.
    std::string host;
    int port = 0;
    std::string what;
    size_t max_connections = SIZE_MAX;
  };
  struct Callbacks {
    // Whether a client from `peer` (IPv4 unmapped) may be served; one that
    // may not is closed, and the callback says why. Empty: everyone may.
    std::function<bool(const asio::ip::address& peer)> admit;
    // How many connections the server has open.
    std::function<size_t()> open;
    // At the cap: closes one open connection to make room; false where none
    // may give way.
    std::function<bool()> make_room;
    // At the cap with no room: tells the client, which is closed after.
    std::function<void(Socket& client, const asio::ip::address& peer)> refuse;
    // A client to serve.
    std::function<void(Socket client, const asio::ip::address& peer)> serve;
  };

  // Binds, listens and starts accepting. Errors as ListenTcp's.
  static Result<std::shared_ptr<Acceptor>> Listen(asio::io_context& io, Options options,
                                                  Callbacks callbacks);
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  int port() const { return port_; }
  bool is_open() const { return acceptor_.is_open(); }
  // Stops accepting and forgets the callbacks (which may hold their server).
  void Close();

 private:
  Acceptor(asio::io_context& io, Options options, Callbacks callbacks);
  static constexpr int kBatch = 64;

  void Accept();
  void TakeWaiting();
  // Serves `client`, whose address is peer_.
  void Take(Socket client);

  asio::io_context& io_;
  Options options_;
  Callbacks callbacks_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  asio::ip::tcp::endpoint peer_;  // the last client's, as accept gave it
  bool out_of_descriptors_ = false;
  int port_ = 0;
};

}  // namespace trun
