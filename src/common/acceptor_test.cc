#include "common/acceptor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace trun {
namespace {

using asio::ip::tcp;

// Runs the loop until `done` holds or 10 s pass.
template <typename Pred>
bool RunUntil(asio::io_context& io, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(10));
    io.restart();
  }
  return done();
}

TEST(AcceptorTest, AdmitsThenMakesRoomThenRefusesAtTheCap) {
  asio::io_context io;
  std::vector<tcp::socket> served;
  int admits = 0, refused = 0, room_asked = 0;
  bool admit_next = true, room = false;
  Acceptor::Callbacks cb;
  cb.admit = [&](const asio::ip::address& peer) {
    ++admits;
    EXPECT_TRUE(peer.is_loopback());
    return admit_next;
  };
  cb.open = [&] { return served.size(); };
  cb.make_room = [&] {
    ++room_asked;
    if (!room) return false;
    served.erase(served.begin());
    return true;
  };
  cb.refuse = [&](Acceptor::Socket&, const asio::ip::address&) { ++refused; };
  cb.serve = [&](tcp::socket s, const asio::ip::address&) { served.push_back(std::move(s)); };
  auto a = Acceptor::Listen(io, {"127.0.0.1", 0, "test server", 1}, std::move(cb));
  ASSERT_TRUE(a.ok()) << a.status().message();
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>((*a)->port()));

  std::vector<tcp::socket> clients;
  auto connect = [&] {
    clients.emplace_back(io);
    clients.back().connect(ep);
  };
  connect();
  ASSERT_TRUE(RunUntil(io, [&] { return served.size() == 1; }));
  // At the cap, with nobody to give way: refused, not served.
  connect();
  ASSERT_TRUE(RunUntil(io, [&] { return refused == 1; }));
  EXPECT_EQ(served.size(), 1u);
  // With room made, the newcomer is served.
  room = true;
  connect();
  ASSERT_TRUE(RunUntil(io, [&] { return room_asked == 2 && served.size() == 1 && admits == 3; }));
  // One that may not be served is never counted against the cap.
  admit_next = false;
  connect();
  ASSERT_TRUE(RunUntil(io, [&] { return admits == 4; }));
  EXPECT_EQ(room_asked, 2);
  EXPECT_EQ(refused, 1);
  (*a)->Close();
  EXPECT_FALSE((*a)->is_open());
}

// Clients that wait in the backlog together are taken in batches; each is
// served with its own address, the one accept gave for it.
TEST(AcceptorTest, AStormIsServedEachWithItsOwnAddress) {
  asio::io_context io;
  std::vector<std::pair<tcp::socket, asio::ip::address>> served;
  Acceptor::Callbacks cb;
  cb.open = [&] { return served.size(); };
  cb.make_room = [] { return false; };
  cb.refuse = [](Acceptor::Socket&, const asio::ip::address&) { ADD_FAILURE() << "refused"; };
  cb.serve = [&](tcp::socket s, const asio::ip::address& peer) {
    served.emplace_back(std::move(s), peer);
  };
  auto a = Acceptor::Listen(io, {"127.0.0.1", 0, "test server", SIZE_MAX}, std::move(cb));
  ASSERT_TRUE(a.ok()) << a.status().message();
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>((*a)->port()));

  // Every connect completes in the kernel's backlog before the loop runs,
  // from five source addresses in turn.
  constexpr size_t kClients = 200;
  std::vector<tcp::socket> clients;
  for (size_t i = 0; i < kClients; ++i) {
    clients.emplace_back(io);
    clients.back().open(tcp::v4());
    clients.back().bind(
        tcp::endpoint(asio::ip::address_v4(static_cast<uint32_t>(0x7F000001u + i % 5)), 0));
    clients.back().connect(ep);
  }
  ASSERT_TRUE(RunUntil(io, [&] { return served.size() == kClients; }));
  for (const auto& [socket, peer] : served) {
    EXPECT_EQ(peer, socket.remote_endpoint().address());
  }
  (*a)->Close();
}

TEST(AcceptorTest, ABadHostIsNamed) {
  asio::io_context io;
  auto a = Acceptor::Listen(io, {"not-an-ip", 0, "test server", 1}, {});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("test server: 'not-an-ip' is not an IP address"),
            std::string::npos);
}

}  // namespace
}  // namespace trun
