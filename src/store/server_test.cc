#include "store/server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "store/client.h"

namespace trun::store {
namespace {

using std::chrono::milliseconds;

// A server on its own thread, as `trun store` runs it.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StoreServer::Start(io_, ServerOptions{"127.0.0.1", 0, {}, 1 << 20});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    work_.emplace(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    asio::post(io_, [this] { server_.reset(); });
    work_.reset();
    io_.stop();
    thread_.join();
  }
  StoreClient Connect() {
    auto c =
        StoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), milliseconds(5000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::unique_ptr<StoreServer> server_;
  std::thread thread_;
};

TEST_F(ServerTest, EveryOperation) {
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("a", "1").ok());
  EXPECT_EQ(*c.Get("a"), "1");
  EXPECT_EQ(*c.Add("n", 5), 5);
  EXPECT_EQ(*c.Add("n", -7), -2);
  EXPECT_EQ(*c.CompareSet("c", "", "x"), "x");
  EXPECT_EQ(*c.CompareSet("c", "x", "y"), "y");
  EXPECT_EQ(*c.CompareSet("c", "q", "z"), "y");
  EXPECT_EQ(*c.CompareSet("missing", "e", "d"), "e");
  EXPECT_TRUE(*c.Check({"a", "n"}));
  EXPECT_FALSE(*c.Check({"a", "nope"}));
  EXPECT_EQ(*c.NumKeys(), 3);
  ASSERT_TRUE(c.Append("a", "23").ok());
  EXPECT_EQ(*c.Get("a"), "123");
  ASSERT_TRUE(c.MultiSet({{"m1", "x"}, {"m2", "y"}}).ok());
  EXPECT_EQ(*c.MultiGet({"m1", "m2"}), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(*c.DeleteKey("m1"));
  EXPECT_FALSE(*c.DeleteKey("m1"));
  PrefixStore p(c, "/worker/attempt_0");
  ASSERT_TRUE(p.Set("k", "v").ok());
  EXPECT_EQ(*c.Get("/worker/attempt_0/k"), "v");
}

TEST_F(ServerTest, WaitCompletesOnAnotherClientsSet) {
  StoreClient waiter = Connect();
  std::thread setter([this] {
    std::this_thread::sleep_for(milliseconds(100));
    StoreClient c = Connect();
    ASSERT_TRUE(c.Set("x", "1").ok());
    ASSERT_TRUE(c.Add("y", 1).ok());
  });
  EXPECT_TRUE(waiter.Wait({"x", "y"}, milliseconds(5000)).ok());
  setter.join();
}

TEST_F(ServerTest, WaitTimesOutAndIsCancelled) {
  StoreClient c = Connect();
  Status s = c.Wait({"never"}, milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  // The connection is still in step after the cancel.
  ASSERT_TRUE(c.Set("after", "ok").ok());
  EXPECT_EQ(*c.Get("after"), "ok");
}

TEST_F(ServerTest, GarbageDropsOnlyThatClient) {
  StoreClient good = Connect();
  for (const std::string& junk :
       {std::string(64, '\xff'), std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x10", 9),
        std::string("GET / HTTP/1.0\r\n\r\n")}) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  ASSERT_TRUE(good.Set("still", "here").ok());
  EXPECT_EQ(*good.Get("still"), "here");
}

TEST_F(ServerTest, ManyConnections) {
  RaiseOpenFileLimit();
  std::vector<StoreClient> clients;
  for (int i = 0; i < 500; ++i) {
    clients.push_back(Connect());
    ASSERT_TRUE(clients.back().Add("count", 1).ok());
  }
  EXPECT_EQ(*clients.front().Add("count", 0), 500);
}

TEST(ClientTest, ConnectGivesUpAtTheDeadline) {
  auto c = StoreClient::Connect("127.0.0.1", 1, milliseconds(300));
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
}

}  // namespace
}  // namespace trun::store
