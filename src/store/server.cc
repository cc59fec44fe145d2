#include "store/server.h"

#include <sys/resource.h>

#include <cstring>
#include <deque>
#include <list>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/strings.h"
#include "store/encode.h"

namespace trun::store {

using asio::ip::tcp;

class StoreServer::Impl : public std::enable_shared_from_this<StoreServer::Impl> {
 public:
  Impl(asio::io_context& io, ServerOptions options)
      : io_(io), options_(std::move(options)), acceptor_(io) {}

  Status Listen() {
    std::error_code ec;
    auto try_bind = [&](const tcp::endpoint& ep, bool dual_stack) {
      ec.clear();
      acceptor_.close(ec);
      acceptor_.open(ep.protocol(), ec);
      if (ec) return false;
      acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (dual_stack) acceptor_.set_option(asio::ip::v6_only(false), ec);
      acceptor_.bind(ep, ec);
      if (ec) return false;
      acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      return !ec;
    };
    const auto port = static_cast<uint16_t>(options_.port);
    bool ok;
    if (options_.host.empty() || options_.host == "::") {
      ok = try_bind(tcp::endpoint(asio::ip::address_v6::any(), port), true) ||
           try_bind(tcp::endpoint(asio::ip::address_v4::any(), port), false);
    } else {
      auto addr = asio::ip::make_address(options_.host, ec);
      if (ec) {
        return Status::InvalidArgument(
            fmt::format("store host '{}' is not an IP address", options_.host));
      }
      ok = try_bind(tcp::endpoint(addr, port), false);
    }
    if (!ok) {
      return Status::IOError(fmt::format("store: cannot listen on {}:{}: {}",
                                         options_.host.empty() ? "*" : options_.host, port,
                                         ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    return Status::OK();
  }

  void Close() {
    std::error_code ec;
    acceptor_.close(ec);
    for (auto& c : connections_) c->Close();
    connections_.clear();
  }

  int port() const { return port_; }
  size_t num_keys() const { return data_.size(); }
  size_t num_connections() const { return connections_.size(); }

 private:
  struct Connection;
  // A WAIT still missing some keys.
  struct Waiter {
    std::weak_ptr<Connection> conn;
    size_t missing = 0;
    bool done = false;
  };

  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(Impl& server, tcp::socket s)
        : server(server),
          keep_server(server.shared_from_this()),
          socket(std::move(s)),
          parser(server.options_.limits) {}

    void Start() { Read(); }

    void Read() {
      socket.async_read_some(
          asio::buffer(buf, sizeof buf), [self = shared_from_this()](std::error_code ec, size_t n) {
            if (ec) {
              self->server.Drop(self, ec == asio::error::eof ? "" : ec.message());
              return;
            }
            self->OnBytes(n);
          });
    }

    void OnBytes(size_t n) {
      if (closed) return;
      if (!parser.Append(buf, n)) return server.Drop(shared_from_this(), parser.error());
      Request req;
      while (true) {
        auto r = parser.Next(&req);
        if (r == RequestParser::Result::kNeedMore) break;
        if (r == RequestParser::Result::kError) {
          return server.Drop(shared_from_this(), parser.error());
        }
        server.Handle(shared_from_this(), req);
        if (closed) return;
      }
      Read();
    }

    // Queues reply bytes; one write is in flight at a time.
    void Send(std::string_view bytes) {
      if (closed) return;
      out.append(bytes);
      if (out.size() > server.options_.max_pending_reply_bytes) {
        return server.Drop(shared_from_this(), "too many unread replies");
      }
      if (!writing) Flush();
    }

    void Flush() {
      if (out.empty() || closed) return;
      writing = true;
      sending.swap(out);
      out.clear();
      asio::async_write(socket, asio::buffer(sending),
                        [self = shared_from_this()](std::error_code ec, size_t) {
                          self->writing = false;
                          self->sending.clear();
                          if (ec) return self->server.Drop(self, ec.message());
                          self->Flush();
                        });
    }

    void Close() {
      if (closed) return;
      closed = true;
      std::error_code ec;
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
    }

    Impl& server;
    // Handlers still queued after the server is destroyed must find it.
    std::shared_ptr<Impl> keep_server;
    tcp::socket socket;
    RequestParser parser;
    char buf[16 * 1024];
    std::string out, sending;
    bool writing = false;
    bool closed = false;
    std::vector<std::shared_ptr<Waiter>> waits;  // this connection's WAITs
    std::vector<std::string> watched;            // v1 WATCH_KEY registrations
  };

  void Accept() {
    acceptor_.async_accept([self = shared_from_this()](std::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        std::error_code ignored;
        s.set_option(tcp::no_delay(true), ignored);
        auto c = std::make_shared<Connection>(*self, std::move(s));
        self->connections_.insert(c);
        c->Start();
      } else if (ec == asio::error::no_descriptors) {
        log::Warning("store: out of file descriptors; raise the open-file limit");
      }
      if (self->acceptor_.is_open()) self->Accept();
    });
  }

  void Drop(const std::shared_ptr<Connection>& c, const std::string& why) {
    if (c->closed) return;
    if (!why.empty()) {
      std::error_code ec;
      auto ep = c->socket.remote_endpoint(ec);
      log::Warning(
          "store: dropped client {}: {}",
          ec ? std::string("?") : fmt::format("{}:{}", ep.address().to_string(), ep.port()), why);
    }
    for (auto& w : c->waits) w->done = true;
    for (auto& key : c->watched) {
      auto it = watchers_.find(key);
      if (it != watchers_.end()) it->second.erase(c.get());
    }
    c->Close();
    connections_.erase(c);
  }

  bool Exists(const std::string& key) const {
    if (data_.count(key)) return true;
    auto q = queues_.find(key);
    return q != queues_.end() && !q->second.empty();
  }

  // A key appeared or changed: finish the WAITs that were missing it.
  void WakeWaiters(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    auto list = std::move(it->second);
    waiters_.erase(it);
    for (auto& w : list) {
      if (w->done || --w->missing > 0) continue;
      w->done = true;
      if (auto c = w->conn.lock()) {
        std::erase(c->waits, w);
        std::string o;
        PutU8(o, kWaitStopWaiting);
        c->Send(o);
      }
    }
  }

  void NotifyWatchers(const std::string& key, uint8_t event, std::string_view old_value,
                      std::string_view new_value) {
    auto it = watchers_.find(key);
    if (it == watchers_.end()) return;
    std::string o;
    PutU8(o, event);
    PutBytes(o, key);
    PutBytes(o, old_value);
    PutBytes(o, new_value);
    for (Connection* c : it->second) c->Send(o);
  }

  void SetValue(const std::string& key, std::string value) {
    auto it = data_.find(key);
    bool created = it == data_.end();
    std::string old = created ? std::string() : std::move(it->second);
    if (!watchers_.empty()) {
      NotifyWatchers(key, created ? kWatchKeyCreated : kWatchKeyUpdated, old, value);
    }
    data_[key] = std::move(value);
    WakeWaiters(key);
  }

  void Handle(const std::shared_ptr<Connection>& c, Request& r) {
    std::string o;
    auto& a = r.args;
    switch (r.op) {
      case Op::kValidate:
        if (r.word != kValidationMagic) return Drop(c, "bad VALIDATE magic");
        return;
      case Op::kPing:
        PutU32(o, r.word);
        break;
      case Op::kSet:
        SetValue(a[0], std::move(a[1]));
        return;
      case Op::kCompareSet: {
        auto it = data_.find(a[0]);
        if (it == data_.end()) {
          if (a[1].empty()) {
            PutBytes(o, a[2]);
            SetValue(a[0], std::move(a[2]));
          } else {
            PutBytes(o, a[1]);
          }
        } else {
          if (it->second == a[1]) SetValue(a[0], std::move(a[2]));
          PutBytes(o, data_[a[0]]);
        }
        break;
      }
      case Op::kGet: {
        auto it = data_.find(a[0]);
        PutBytes(o, it == data_.end() ? std::string_view() : std::string_view(it->second));
        break;
      }
      case Op::kAdd: {
        auto it = data_.find(a[0]);
        int64_t v = r.number;
        if (it != data_.end()) {
          auto cur = ParseInt(it->second);
          if (!cur) return Drop(c, fmt::format("ADD to non-integer key '{}'", a[0]));
          v = static_cast<int64_t>(static_cast<uint64_t>(*cur) + static_cast<uint64_t>(v));
        }
        SetValue(a[0], std::to_string(v));
        PutI64(o, v);
        break;
      }
      case Op::kCheck: {
        bool all = true;
        for (auto& k : a) all = all && Exists(k);
        PutU8(o, all ? kCheckReady : kCheckNotReady);
        break;
      }
      case Op::kWait: {
        auto w = std::make_shared<Waiter>();
        w->conn = c;
        for (auto& k : a) {
          if (!Exists(k)) {
            ++w->missing;
            waiters_[k].push_back(w);
          }
        }
        if (w->missing > 0) {
          c->waits.push_back(w);
          return;  // answered by WakeWaiters
        }
        PutU8(o, kWaitStopWaiting);
        break;
      }
      case Op::kGetNumKeys:
        PutI64(o, static_cast<int64_t>(data_.size()));
        break;
      case Op::kWatchKey:
        watchers_[a[0]].insert(c.get());
        c->watched.push_back(a[0]);
        PutU8(o, kWatchCallbackRegistered);
        break;
      case Op::kDeleteKey: {
        auto it = data_.find(a[0]);
        bool found = it != data_.end();
        if (found) {
          if (!watchers_.empty()) NotifyWatchers(a[0], kWatchKeyDeleted, it->second, "");
          data_.erase(it);
        }
        PutI64(o, found ? 1 : 0);
        break;
      }
      case Op::kAppend: {
        auto it = data_.find(a[0]);
        if (it != data_.end() &&
            it->second.size() + a[1].size() > options_.limits.max_value_bytes) {
          return Drop(c, fmt::format("APPEND would grow '{}' over the value limit", a[0]));
        }
        std::string old = it == data_.end() ? std::string() : it->second;
        std::string& v = data_[a[0]];
        v += a[1];
        if (!watchers_.empty()) NotifyWatchers(a[0], kWatchKeyAppended, old, v);
        WakeWaiters(a[0]);
        return;
      }
      case Op::kMultiGet:
        for (auto& k : a) {
          auto it = data_.find(k);
          PutBytes(o, it == data_.end() ? std::string_view() : std::string_view(it->second));
        }
        break;
      case Op::kMultiSet:
        for (size_t i = 0; i + 1 < a.size(); i += 2) SetValue(a[i], std::move(a[i + 1]));
        return;
      case Op::kCancelWait:
        for (auto& w : c->waits) w->done = true;
        c->waits.clear();
        PutU8(o, kWaitCanceled);
        break;
      case Op::kQueuePush:
        queues_[a[0]].push_back(std::move(a[1]));
        WakeWaiters(a[0]);
        return;
      case Op::kQueuePop: {
        auto it = queues_.find(a[0]);
        if (it == queues_.end() || it->second.empty()) {
          PutI64(o, -1);
        } else {
          PutBytes(o, it->second.front());
          it->second.pop_front();
        }
        break;
      }
      case Op::kQueueLen: {
        auto it = queues_.find(a[0]);
        PutI64(o, it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
        break;
      }
    }
    c->Send(o);
  }

  asio::io_context& io_;
  ServerOptions options_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::unordered_set<std::shared_ptr<Connection>> connections_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;
  std::unordered_map<std::string, std::unordered_set<Connection*>> watchers_;
};

Result<std::unique_ptr<StoreServer>> StoreServer::Start(asio::io_context& io,
                                                        ServerOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  TRUN_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

StoreServer::~StoreServer() { impl_->Close(); }
int StoreServer::port() const { return impl_->port(); }
size_t StoreServer::num_keys() const { return impl_->num_keys(); }
size_t StoreServer::num_connections() const { return impl_->num_connections(); }

size_t RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

}  // namespace trun::store
