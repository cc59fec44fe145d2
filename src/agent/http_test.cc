#include "agent/http.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace trun::agent {
namespace {

using State = HttpRequestParser::State;
using asio::ip::tcp;
using namespace std::chrono_literals;

// ---- the parser -------------------------------------------------------------

TEST(HttpParserTest, ParsesAGetInOneGo) {
  HttpRequestParser p;
  ASSERT_EQ(p.Feed("GET /metrics?name=x HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"),
            State::kComplete);
  EXPECT_EQ(p.request().method, "GET");
  EXPECT_EQ(p.request().target, "/metrics?name=x");
  EXPECT_EQ(p.request().path, "/metrics");
  EXPECT_EQ(p.request().minor_version, 1);
}

TEST(HttpParserTest, ParsesByteByByteWithBareLinefeeds) {
  HttpRequestParser p;
  std::string req = "\r\n\nHEAD /health HTTP/1.0\nUser-Agent: probe\n\n";
  for (size_t i = 0; i + 1 < req.size(); ++i) {
    ASSERT_EQ(p.Feed(req.substr(i, 1)), State::kIncomplete) << i;
  }
  ASSERT_EQ(p.Feed(req.substr(req.size() - 1)), State::kComplete);
  EXPECT_EQ(p.request().method, "HEAD");
  EXPECT_EQ(p.request().path, "/health");
  EXPECT_EQ(p.request().minor_version, 0);
  // Bytes after the request change nothing.
  EXPECT_EQ(p.Feed("garbage"), State::kComplete);
}

TEST(HttpParserTest, ZeroContentLengthIsFine) {
  HttpRequestParser p;
  EXPECT_EQ(p.Feed("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), State::kComplete);
}

struct BadCase {
  const char* bytes;
  int status;
};

TEST(HttpParserTest, RejectsWhatItDoesNotServe) {
  const BadCase cases[] = {
      {"\x16\x03\x01\x02\xfc\x03\x03\n\n", 400},  // a TLS hello
      {"GET\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET metrics HTTP/1.1\r\n\r\n", 400},
      {"GET http://host/metrics HTTP/1.1\r\n\r\n", 400},
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
  };
  for (const auto& c : cases) {
    HttpRequestParser p;
    EXPECT_EQ(p.Feed(c.bytes), State::kError) << c.bytes;
    EXPECT_EQ(p.error_status(), c.status) << c.bytes << ": " << p.error();
    EXPECT_FALSE(p.error().empty());
  }
}

TEST(HttpParserTest, BoundsTheHead) {
  HttpRequestParser line(64);
  EXPECT_EQ(line.Feed("GET /" + std::string(100, 'a')), State::kError);
  EXPECT_EQ(line.error_status(), 414);

  HttpRequestParser head(64);
  EXPECT_EQ(head.Feed("GET / HTTP/1.1\r\n"), State::kIncomplete);
  State s = State::kIncomplete;
  for (int i = 0; i < 1000 && s == State::kIncomplete; ++i) s = head.Feed("X-Pad: yyyyyyyy\r\n");
  EXPECT_EQ(s, State::kError);
  EXPECT_EQ(head.error_status(), 431);

  // Endless empty lines hold nothing.
  HttpRequestParser blank(64);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(blank.Feed("\r\n"), State::kIncomplete);
}

TEST(HttpParserTest, EncodesResponses) {
  HttpResponse r;
  r.status = 405;
  r.headers = {{"Allow", "GET, HEAD"}};
  r.body = "no\n";
  EXPECT_EQ(EncodeResponse(r, false),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 3\r\nCache-Control: no-store\r\nConnection: close\r\n"
            "Allow: GET, HEAD\r\n\r\nno\n");
  std::string head = EncodeResponse(r, true);
  EXPECT_TRUE(head.ends_with("\r\n\r\n"));
  EXPECT_NE(head.find("Content-Length: 3\r\n"), std::string::npos);
}

// ---- the server, on a loop of its own; clients block in the test ----------

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServer::Options o) {
    o.host = "127.0.0.1";
    auto s = HttpServer::Start(io_, o, [this](const HttpRequest& req, HttpServer::Responder reply) {
      ++handled_;
      HttpResponse r;
      r.body = "you asked for " + req.path + "\n";
      // /later is answered when /release comes, as a reply gathered off
      // the loop is (the agent's job-wide /stacks).
      if (req.path == "/later") {
        later_ = std::move(reply);
        return;
      }
      if (req.path == "/release" && later_) {
        HttpResponse l;
        l.body = "later\n";
        later_(std::move(l));
      }
      reply(std::move(r));
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    work_.emplace(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] { server_.reset(); });
    work_.reset();
    thread_.join();
  }

  tcp::socket Connect() {
    tcp::socket s(client_io_);
    s.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(server_->port())));
    return s;
  }
  // Sends `request` and reads until the server closes.
  std::string Exchange(const std::string& request) {
    tcp::socket s = Connect();
    asio::write(s, asio::buffer(request));
    return ReadAll(s);
  }
  static std::string ReadAll(tcp::socket& s) {
    std::string out;
    std::error_code ec;
    asio::read(s, asio::dynamic_buffer(out), ec);
    return out;
  }

  asio::io_context io_{1};
  asio::io_context client_io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::atomic<int> handled_{0};
  HttpServer::Responder later_;  // the loop's thread only
  std::atomic<int64_t> evicted_{-1};
};

TEST_F(HttpServerTest, ServesGetAndHeadAndRefusesOtherMethods) {
  StartServer({});
  std::string get = Exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(get.starts_with("HTTP/1.1 200 OK\r\n")) << get;
  EXPECT_TRUE(get.ends_with("\r\n\r\nyou asked for /health\n")) << get;
  EXPECT_NE(get.find("Connection: close\r\n"), std::string::npos);

  std::string head = Exchange("HEAD /health HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;

  std::string del = Exchange("DELETE /health HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(del.starts_with("HTTP/1.1 405 ")) << del;
  EXPECT_NE(del.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(handled_, 2);
}

TEST_F(HttpServerTest, AReplyMayComeLaterWhileOthersAreServed) {
  StartServer({});
  tcp::socket waiting = Connect();
  asio::write(waiting, asio::buffer(std::string("GET /later HTTP/1.1\r\n\r\n")));
  for (int i = 0; i < 1000 && handled_ == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(handled_, 1);
  EXPECT_TRUE(Exchange("GET /a HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_TRUE(Exchange("GET /release HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
  std::string later = ReadAll(waiting);
  EXPECT_TRUE(later.starts_with("HTTP/1.1 200 ")) << later;
  EXPECT_TRUE(later.ends_with("\r\n\r\nlater\n")) << later;
}

TEST_F(HttpServerTest, GarbageGetsAnErrorAndTheServerGoesOn) {
  StartServer({});
  EXPECT_TRUE(Exchange(std::string("\0\1\2\3 hello\r\n\r\n", 15)).starts_with("HTTP/1.1 400 "));
  EXPECT_TRUE(
      Exchange("GET / HTTP/1.1\r\n" + std::string(20000, 'x')).starts_with("HTTP/1.1 431 "));
  {
    tcp::socket s = Connect();
    s.close();  // connects and leaves
  }
  EXPECT_TRUE(Exchange("GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
}

TEST_F(HttpServerTest, SlowClientIsCutOffAndStallsNobody) {
  HttpServer::Options o;
  o.timeout = 1500ms;
  StartServer(o);
  tcp::socket slow = Connect();
  asio::write(slow, asio::buffer(std::string("GET /health HTTP/1.1\r\nX: ")));
  // Others are served while it dawdles, long before its deadline.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Exchange("GET /a HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
  // Then it is closed without a reply, however long it keeps trickling.
  EXPECT_EQ(ReadAll(slow), "");
}

TEST_F(HttpServerTest, IdleConnectionsCannotLockProbesOut) {
  HttpServer::Options o;
  o.max_connections = 2;
  o.timeout = 10s;
  StartServer(o);
  tcp::socket a = Connect(), b = Connect();
  asio::write(a, asio::buffer(std::string("GET /")));
  // A newcomer over the cap is served; the oldest unfinished client goes.
  EXPECT_TRUE(Exchange("GET /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_EQ(ReadAll(a), "");
  // And again, as often as it takes.
  tcp::socket c = Connect();
  EXPECT_TRUE(Exchange("GET /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_EQ(ReadAll(b), "");
  asio::post(io_, [this] { evicted_ = static_cast<int64_t>(server_->stats().evicted); });
  for (int i = 0; i < 1000 && evicted_ < 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_GE(evicted_, 2);
}

TEST_F(HttpServerTest, ClientsThatHadTheirReplyAndStayMakeRoom) {
  HttpServer::Options o;
  o.max_connections = 1;
  o.timeout = 10s;
  StartServer(o);
  tcp::socket stays = Connect();
  asio::write(stays, asio::buffer(std::string("GET /a HTTP/1.1\r\n\r\n")));
  std::string first;
  std::error_code ec;
  while (!first.ends_with("you asked for /a\n") && !ec) {
    char buf[512];
    size_t n = stays.read_some(asio::buffer(buf), ec);
    first.append(buf, n);
  }
  ASSERT_TRUE(first.starts_with("HTTP/1.1 200 ")) << first;
  // It keeps its end open; the next client is served all the same (a 503
  // only while the server has yet to see its write complete).
  std::string next;
  for (int i = 0; i < 100 && !next.starts_with("HTTP/1.1 200 "); ++i) {
    if (i) std::this_thread::sleep_for(10ms);
    next = Exchange("GET /b HTTP/1.1\r\n\r\n");
  }
  EXPECT_TRUE(next.starts_with("HTTP/1.1 200 ")) << next;
}

TEST(HttpServerStartTest, RejectsANameAsAddress) {
  asio::io_context io;
  HttpServer::Options o;
  o.host = "localhost";
  auto s =
      HttpServer::Start(io, o, [](const HttpRequest&, HttpServer::Responder reply) { reply({}); });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trun::agent
