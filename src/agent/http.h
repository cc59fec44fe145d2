// A small HTTP/1.1 server for the agent's /health and /metrics, on the
// agent's own event loop.
//
// What it accepts, a narrowing of RFC 9112 (a bare LF ends a line as CRLF
// does; empty lines before the request line are skipped):
//
//   request      = request-line *header-line CRLF          ; no body
//   request-line = method SP origin-form SP "HTTP/1." DIGIT CRLF
//   method       = 1*tchar
//   origin-form  = "/" *( any byte above SP but DEL )      ; path ["?" query]
//   header-line  = field-name ":" OWS field-value OWS CRLF
//   field-name   = 1*tchar
//   field-value  = *( HTAB / SP / VCHAR / obs-text )
//
// A request with a body (Content-Length above 0) is 413, Transfer-Encoding
// is 501, another HTTP version 505, a head over the limit 431 (414 when
// even the request line does not fit), anything else malformed 400. Every
// reply closes its connection, so a connection holds one request at most.
//
// Why a slow or hostile client cannot stall the agent or make it allocate
// without bound: everything is asynchronous on the loop; a connection may
// hold at most `max_head_bytes` of request and one reply; the whole
// exchange has one deadline (a client that trickles bytes or never reads
// its reply is closed when it passes); and at `max_connections` a new
// client closes the oldest connection that is not being sent a reply (so
// idle connections cannot lock probes out), or, when every one is, gets a
// 503 written without waiting.
//
// Thread-safety: HttpRequestParser and EncodeResponse are plain values and
// pure functions; HttpServer runs on its io_context's one thread.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun::agent {

inline constexpr size_t kDefaultMaxHttpHeadBytes = 8192;

struct HttpRequest {
  std::string method;  // "GET"
  std::string target;  // as sent: "/metrics?x=1"
  std::string path;    // without the query: "/metrics"
  int minor_version = 1;
  // The address and port the client's connection reached (common/net.h's
  // SocketEndpoint), set by the server: what a proof of the job token
  // names (agent/stacks.h).
  std::string local;
};

class HttpRequestParser {
 public:
  enum class State { kIncomplete, kComplete, kError };

  explicit HttpRequestParser(size_t max_head_bytes = kDefaultMaxHttpHeadBytes)
      : max_head_bytes_(max_head_bytes) {}

  // Takes the next bytes. Once the state is kComplete or kError it stays so
  // and further bytes are ignored.
  State Feed(std::string_view bytes);
  State state() const { return state_; }
  const HttpRequest& request() const { return request_; }
  // For kError: the status to answer with, and why.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

 private:
  State Fail(int status, std::string why);
  State Parse(std::string_view head);

  size_t max_head_bytes_;
  std::string buf_;
  size_t scanned_ = 0;  // bytes of buf_ known to hold no end of head
  State state_ = State::kIncomplete;
  HttpRequest request_;
  int error_status_ = 0;
  std::string error_;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// RFC 9110's reason phrase for the statuses this server sends.
const char* ReasonPhrase(int status);
// The bytes of `r` with Content-Length and "Connection: close"; `head_only`
// leaves the body out (a HEAD request).
std::string EncodeResponse(const HttpResponse& r, bool head_only);

class HttpServer {
 public:
  struct Options {
    // "" or "::": every address, IPv6 and IPv4 (IPv4 alone where IPv6 is
    // off). Otherwise a literal address.
    std::string host;
    int port = 0;  // 0: a free port
    size_t max_connections = 64;
    std::chrono::milliseconds timeout{5000};  // a whole request and its reply
    size_t max_head_bytes = kDefaultMaxHttpHeadBytes;
  };
  // Sends a request's reply: called once, on the loop's thread, at once or
  // later (an answer gathered off the loop); a reply after the
  // connection's deadline, or after it was closed to make room, is
  // dropped.
  using Responder = std::function<void(HttpResponse)>;
  // Answers each GET or HEAD request through its Responder; other methods
  // get 405 without it.
  using Handler = std::function<void(const HttpRequest&, Responder)>;

  struct Stats {
    uint64_t connections = 0;  // accepted and served
    uint64_t evicted = 0;      // closed to make room for a newcomer
    uint64_t rejected = 0;     // turned away, every slot replying
    uint64_t timed_out = 0;
    std::map<int, uint64_t> responses;  // by status
  };

  // A host that is not an IP literal is an InvalidArgument; a port that
  // cannot be bound an IOError.
  static Result<std::unique_ptr<HttpServer>> Start(asio::io_context& io, Options options,
                                                   Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  const Stats& stats() const;

 private:
  class Impl;
  explicit HttpServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace trun::agent
