#include "common/net.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace trun {
namespace {

using std::chrono::seconds;
using std::chrono::steady_clock;

TEST(ResolveWithin, ReadsLiteralsAtOnceAndLooksUpNames) {
  auto literal = ResolveWithin("127.0.0.1", "80", steady_clock::now());  // no time at all
  ASSERT_TRUE(literal.ok()) << literal.status().ToString();
  EXPECT_EQ((*literal)->ai_family, AF_INET);
  auto name = ResolveWithin("localhost", "80", steady_clock::now() + seconds(30));
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_NE(name->get(), nullptr);
}

TEST(SocketEndpoint, BothEndsWriteOneConnectionAlike) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  ASSERT_TRUE(ListenTcp(acceptor, "", 0, "test").ok());  // dual stack where IPv6 is on
  asio::ip::tcp::socket client(io);
  client.connect({asio::ip::make_address("127.0.0.1"), acceptor.local_endpoint().port()});
  auto server = acceptor.accept();
  const std::string reached = SocketEndpoint(client.native_handle(), true);
  EXPECT_EQ(reached, "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()));
  EXPECT_EQ(SocketEndpoint(server.native_handle(), false), reached);
  EXPECT_EQ(SocketEndpoint(-1, false), "");
}

}  // namespace
}  // namespace trun
