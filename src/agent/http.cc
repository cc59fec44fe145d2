#include "agent/http.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/acceptor.h"
#include "common/net.h"
#include "common/strings.h"

namespace trun::agent {
namespace {

using asio::ip::tcp;

bool IsTchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c);
}

bool IsToken(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTchar); }

}  // namespace

HttpRequestParser::State HttpRequestParser::Fail(int status, std::string why) {
  state_ = State::kError;
  error_status_ = status;
  error_ = std::move(why);
  buf_.clear();
  return state_;
}

HttpRequestParser::State HttpRequestParser::Feed(std::string_view bytes) {
  if (state_ != State::kIncomplete) return state_;
  // One byte over the limit is enough to know that it was broken.
  buf_.append(bytes.substr(0, std::min(bytes.size(), max_head_bytes_ + 1 - buf_.size())));
  if (scanned_ == 0) {
    // Empty lines before the request line are skipped (RFC 9112 2.2).
    size_t start = buf_.find_first_not_of("\r\n");
    buf_.erase(0, start == std::string::npos ? buf_.size() : start);
  }
  // The head ends at an empty line: LF, then LF or CRLF.
  for (size_t i = scanned_; i < buf_.size(); ++i) {
    if (buf_[i] != '\n') continue;
    size_t j = i + 1 < buf_.size() && buf_[i + 1] == '\r' ? i + 2 : i + 1;
    if (j >= buf_.size()) break;  // the next bytes decide
    if (buf_[j] == '\n') return Parse(std::string_view(buf_).substr(0, i + 1));
    scanned_ = i + 1;
  }
  if (buf_.size() > max_head_bytes_) {
    return buf_.find('\n') == std::string::npos
               ? Fail(414, fmt::format("request line longer than {} bytes", max_head_bytes_))
               : Fail(431, fmt::format("request head longer than {} bytes", max_head_bytes_));
  }
  return state_;
}

HttpRequestParser::State HttpRequestParser::Parse(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    head.remove_prefix(nl + 1);
  }
  std::string_view rl = lines[0];
  size_t sp1 = rl.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(400, "malformed request line");
  }
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (!IsToken(method)) return Fail(400, "malformed method");
  if (target.empty() || target[0] != '/' || std::any_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
      })) {
    return Fail(400, "the target must be a path starting with '/'");
  }
  if (version == "HTTP/1.0" || version == "HTTP/1.1") {
    request_.minor_version = version.back() - '0';
  } else if (version.size() == 8 && version.starts_with("HTTP/") &&
             std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
             std::isdigit(static_cast<unsigned char>(version[7]))) {
    return Fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  } else {
    return Fail(400, "malformed HTTP version");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.starts_with(' ') || line.starts_with('\t')) {
      return Fail(400, "folded header lines are not accepted");
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
      return Fail(400, "malformed header line");
    }
    std::string_view value = Trim(line.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
        })) {
      return Fail(400, "control character in a header value");
    }
    std::string name = Lower(line.substr(0, colon));
    if (name == "transfer-encoding") return Fail(501, "request bodies are not accepted");
    if (name == "content-length") {
      auto n = ParseInt(value);
      if (!n || *n < 0) return Fail(400, "malformed Content-Length");
      if (*n > 0) return Fail(413, "request bodies are not accepted");
    }
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.path = std::string(target.substr(0, target.find_first_of("?#")));
  buf_.clear();
  state_ = State::kComplete;
  return state_;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Unknown";
}

std::string EncodeResponse(const HttpResponse& r, bool head_only) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
      "Connection: close\r\n",
      r.status, ReasonPhrase(r.status), r.content_type, r.body.size());
  for (const auto& [name, value] : r.headers) out += fmt::format("{}: {}\r\n", name, value);
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

class HttpServer::Impl : public std::enable_shared_from_this<HttpServer::Impl> {
 public:
  Impl(asio::io_context& io, Options options, Handler handler)
      : options_(std::move(options)), handler_(std::move(handler)), io_(io) {}

  Status Listen() {
    Acceptor::Callbacks cb;
    cb.open = [this] { return conns_.size(); };
    cb.make_room = [this] { return MakeRoom(); };
    cb.refuse = [this](Acceptor::Socket& s, const asio::ip::address&) { Refuse(s); };
    cb.serve = [this](tcp::socket s, const asio::ip::address&) { Serve(std::move(s)); };
    auto acceptor = Acceptor::Listen(
        io_, {options_.host, options_.port, "health check server", options_.max_connections},
        std::move(cb));
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = std::move(*acceptor);
    return Status::OK();
  }

  void Close() {
    if (acceptor_) acceptor_->Close();
    for (const auto& [seq, c] : conns_) c->Close();
    conns_.clear();
  }

  int port() const { return acceptor_->port(); }
  const Stats& stats() const { return stats_; }

 private:
  struct Conn : std::enable_shared_from_this<Conn> {
    Conn(Impl& server, tcp::socket s)
        : server(server),
          keep_server(server.shared_from_this()),
          socket(std::move(s)),
          deadline(socket.get_executor()),
          parser(server.options_.max_head_bytes),
          seq(++server.last_seq_) {}

    void Start() {
      deadline.expires_after(server.options_.timeout);
      deadline.async_wait([self = shared_from_this()](std::error_code ec) {
        if (ec || self->closed) return;
        ++self->server.stats_.timed_out;
        self->server.Finish(self);
      });
      Read();
    }

    void Read() {
      socket.async_read_some(asio::buffer(buf),
                             [self = shared_from_this()](std::error_code ec, size_t n) {
                               if (self->closed) return;
                               if (ec) return self->server.Finish(self);
                               switch (self->parser.Feed(std::string_view(self->buf, n))) {
                                 case HttpRequestParser::State::kIncomplete:
                                   return self->Read();
                                 case HttpRequestParser::State::kComplete: {
                                   HttpRequest req = self->parser.request();
                                   req.local = SocketEndpoint(self->socket.native_handle(), false);
                                   const bool head = req.method == "HEAD";
                                   return self->server.Answer(req, [self, head](HttpResponse r) {
                                     if (!self->closed && !self->writing) self->Reply(r, head);
                                   });
                                 }
                                 case HttpRequestParser::State::kError: {
                                   HttpResponse r;
                                   r.status = self->parser.error_status();
                                   r.body = self->parser.error() + "\n";
                                   return self->Reply(r, false);
                                 }
                               }
                             });
    }

    void Reply(const HttpResponse& r, bool head_only) {
      writing = true;
      ++server.stats_.responses[r.status];
      out = EncodeResponse(r, head_only);
      asio::async_write(socket, asio::buffer(out),
                        [self = shared_from_this()](std::error_code ec, size_t) {
                          if (self->closed) return;
                          self->writing = false;
                          if (ec) return self->server.Finish(self);
                          std::error_code ignored;
                          self->socket.shutdown(tcp::socket::shutdown_send, ignored);
                          self->Linger();
                        });
    }

    // Closing a socket with unread bytes resets it, and the reset can
    // destroy the reply before the client reads it (a 431 to a client still
    // sending). So the rest is read and dropped until the client closes or
    // the deadline passes (RFC 9112 9.6).
    void Linger() {
      socket.async_read_some(asio::buffer(buf),
                             [self = shared_from_this()](std::error_code ec, size_t) {
                               if (self->closed) return;
                               if (ec) return self->server.Finish(self);
                               self->Linger();
                             });
    }

    void Close() {
      if (closed) return;
      closed = true;
      std::error_code ec;
      deadline.cancel();
      socket.close(ec);
    }

    Impl& server;
    // Handlers still queued after the server is destroyed must find it.
    std::shared_ptr<Impl> keep_server;
    tcp::socket socket;
    asio::steady_timer deadline;
    HttpRequestParser parser;
    const uint64_t seq;  // accept order
    char buf[4096];
    std::string out;
    bool writing = false;  // a reply is on its way out
    bool closed = false;
  };

  // At the cap, the oldest client that is not being sent a reply (one that
  // has not finished its request, or has had its reply and not left) makes
  // room for the newcomer, so that idle clients cannot lock probes out: a
  // real request arrives in one go and is answered at once.
  bool MakeRoom() {
    auto it = std::find_if(conns_.begin(), conns_.end(),
                           [](const auto& entry) { return !entry.second->writing; });
    if (it == conns_.end()) return false;
    ++stats_.evicted;
    Finish(std::shared_ptr<Conn>(it->second));
    return true;
  }

  // Every slot is sending a reply: told at once, without waiting on the
  // client (a full socket buffer just loses the 503).
  void Refuse(Acceptor::Socket& s) {
    ++stats_.rejected;
    ++stats_.responses[503];
    std::error_code ec;
    s.non_blocking(true, ec);
    HttpResponse busy;
    busy.status = 503;
    busy.body = "too many connections\n";
    asio::write(s, asio::buffer(EncodeResponse(busy, false)), ec);
  }

  void Serve(tcp::socket s) {
    ++stats_.connections;
    auto c = std::make_shared<Conn>(*this, std::move(s));
    conns_.emplace(c->seq, c);
    c->Start();
  }

  void Answer(const HttpRequest& req, const Responder& reply) {
    if (req.method != "GET" && req.method != "HEAD") {
      HttpResponse r;
      r.status = 405;
      r.headers = {{"Allow", "GET, HEAD"}};
      r.body = "only GET and HEAD are served\n";
      return reply(std::move(r));
    }
    handler_(req, reply);
  }

  void Finish(const std::shared_ptr<Conn>& c) {
    c->Close();
    conns_.erase(c->seq);
  }

  Options options_;
  Handler handler_;
  asio::io_context& io_;
  std::shared_ptr<Acceptor> acceptor_;
  std::map<uint64_t, std::shared_ptr<Conn>> conns_;  // oldest first
  uint64_t last_seq_ = 0;
  Stats stats_;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Start(asio::io_context& io, Options options,
                                                      Handler handler) {
  auto impl = std::make_shared<Impl>(io, std::move(options), std::move(handler));
  TRUN_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { impl_->Close(); }
int HttpServer::port() const { return impl_->port(); }
const HttpServer::Stats& HttpServer::stats() const { return impl_->stats(); }

}  // namespace trun::agent
