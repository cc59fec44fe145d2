#include "store/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "store/client.h"
#include "store/connection.h"
#include "store/encode.h"
#include "store/golden_bytes.h"
#include "store/link.h"
#include "store/raw_socket.h"
#include "store/server_thread.h"

namespace trun::store {
namespace {

using std::chrono::milliseconds;

using golden::Op1;
using golden::Str;
using golden::U32;
using golden::U64;

using Raw = golden::RawSocket;

ServerOptions Options(std::string host, int port) {
  ServerOptions o;
  o.host = std::move(host);
  o.port = port;
  return o;
}

// A server on its own thread, as `trun store` runs it.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  void Start(Limits limits, size_t max_pending_reply_bytes = 1 << 20, std::string host = "",
             size_t max_partial_bytes = kDefaultMaxBufferedBytes,
             size_t max_queued_reply_bytes = 4 * kDefaultMaxBufferedBytes) {
    server_.reset();
    ServerOptions options;
    options.host = host.empty() ? "127.0.0.1" : host;
    options.limits = limits;
    options.max_pending_reply_bytes = max_pending_reply_bytes;
    options.max_partial_bytes = max_partial_bytes;
    options.max_queued_reply_bytes = max_queued_reply_bytes;
    auto s = StoreServerThread::Start(options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  int port() const { return server_->port(); }
  StoreClient Connect() {
    auto c = StoreClient::Connect("127.0.0.1", port(), milliseconds(5000), milliseconds(5000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }
  size_t Waits() {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.num_waits(); });
    return n;
  }
  size_t WaitIndexEntries() {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.num_wait_index_entries(); });
    return n;
  }
  size_t Connections() {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.num_connections(); });
    return n;
  }
  // Polls until the server has seen what the clients did.
  template <typename F>
  bool Eventually(F f) {
    for (int i = 0; i < 500; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<StoreServerThread> server_;
};

TEST_F(ServerTest, EveryOperation) {
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("a", "1").ok());
  EXPECT_EQ(*c.Get("a"), "1");
  EXPECT_EQ(*c.Add("n", 5), 5);
  EXPECT_EQ(*c.Add("n", -7), -2);
  EXPECT_EQ(*c.Get("n"), "-2");
  EXPECT_EQ(*c.CompareSet("c", "", "x"), "x");
  EXPECT_EQ(*c.CompareSet("c", "x", "y"), "y");
  EXPECT_EQ(*c.CompareSet("c", "q", "z"), "y");
  EXPECT_EQ(*c.CompareSet("missing", "e", "d"), "e");
  EXPECT_FALSE(*c.Check({"missing"}));
  EXPECT_TRUE(*c.Check({"a", "n"}));
  EXPECT_FALSE(*c.Check({"a", "nope"}));
  EXPECT_TRUE(*c.Check({}));
  EXPECT_EQ(*c.NumKeys(), 3);
  ASSERT_TRUE(c.Append("a", "23").ok());
  EXPECT_EQ(*c.Get("a"), "123");
  ASSERT_TRUE(c.Append("fresh", "x").ok());  // APPEND creates
  EXPECT_EQ(*c.Get("fresh"), "x");
  ASSERT_TRUE(c.MultiSet({{"m1", "x"}, {"m2", "y"}}).ok());
  EXPECT_EQ(*c.MultiGet({"m1", "m2", "absent"}), (std::vector<std::string>{"x", "y", ""}));
  EXPECT_TRUE(*c.DeleteKey("m1"));
  EXPECT_FALSE(*c.DeleteKey("m1"));
  EXPECT_TRUE(c.Ping().ok());
  ASSERT_TRUE(c.Set("bin", std::string("\0\xff\n", 3)).ok());
  EXPECT_EQ(*c.Get("bin"), std::string("\0\xff\n", 3));
}

TEST_F(ServerTest, PrefixStoreJoinsWithASlash) {
  StoreClient c = Connect();
  PrefixStore p(c, "/worker/attempt_0");
  ASSERT_TRUE(p.Set("k", "v").ok());
  EXPECT_EQ(*c.Get("/worker/attempt_0/k"), "v");
  EXPECT_EQ(*p.Get("k"), "v");
  EXPECT_EQ(*p.Add("n", 2), 2);
  EXPECT_EQ(*p.CompareSet("k", "v", "w"), "w");
  EXPECT_TRUE(*p.Check({"k", "n"}));
  EXPECT_TRUE(p.Wait({"k"}, milliseconds(1000)).ok());
  ASSERT_TRUE(p.MultiSet({{"a", "1"}}).ok());
  EXPECT_EQ(*p.MultiGet({"a"}), std::vector<std::string>{"1"});
  ASSERT_TRUE(p.Append("a", "2").ok());
  EXPECT_EQ(*c.Get("/worker/attempt_0/a"), "12");
  EXPECT_TRUE(*p.DeleteKey("a"));
  EXPECT_EQ(*p.NumKeys(), 2);
}

// The allowlist (issue 19): tests turn local_always off, so that loopback,
// the only address a test can connect from, stands for a stranger.
Allowlist Only(std::vector<std::string> addrs, std::string strangers_prefix = "") {
  Allowlist a;
  a.local_always = false;
  for (auto& s : addrs) {
    auto n = ParseNetworks(s);
    EXPECT_TRUE(n.ok() && n->has_value()) << s;
    for (auto& x : **n) a.networks.push_back(x);
  }
  a.strangers_prefix = std::move(strangers_prefix);
  return a;
}

TEST(Networks, ParseAndContain) {
  auto any = ParseNetworks("any");
  ASSERT_TRUE(any.ok());
  EXPECT_FALSE(any->has_value());
  auto n = ParseNetworks(" 10.200.0.0/24, 192.168.1.7,fd00::/8 ");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ((*n)->size(), 3u);
  auto in = [&](const char* a) {
    for (const auto& x : **n) {
      if (x.Contains(asio::ip::make_address(a))) return true;
    }
    return false;
  };
  EXPECT_TRUE(in("10.200.0.3"));
  EXPECT_FALSE(in("10.200.1.3"));
  EXPECT_TRUE(in("192.168.1.7"));
  EXPECT_FALSE(in("192.168.1.8"));
  EXPECT_TRUE(in("::ffff:10.200.0.9"));  // a dual-stack socket's IPv4 peer
  EXPECT_TRUE(in("fd12::1"));
  EXPECT_FALSE(in("fe80::1"));
  for (const char* bad : {"10.0.0.0/33", "host.example", "10.0.0.0/x", "::/129", "1.2.3.4/-1"}) {
    EXPECT_FALSE(ParseNetworks(bad).ok()) << bad;
  }
}

TEST_F(ServerTest, EveryoneIsServedWithoutAnAllowlist) {
  StoreClient c = Connect();
  EXPECT_TRUE(c.Set("k", "v").ok());
  uint64_t refused = 1;
  server_->RunOnLoop([&](StoreServer& s) { refused = s.num_refused(); });
  EXPECT_EQ(refused, 0u);
}

TEST_F(ServerTest, AllowlistRefusesAStrangerAtAccept) {
  server_->RunOnLoop([](StoreServer& s) { s.SetAllowlist(Only({"10.200.0.1"})); });
  Raw r(port());
  ASSERT_TRUE(r.connected());  // the kernel accepts; the server closes at once
  EXPECT_TRUE(r.Closed());
  uint64_t refused = 0;
  server_->RunOnLoop([&](StoreServer& s) { refused = s.num_refused(); });
  EXPECT_EQ(refused, 1u);
  EXPECT_EQ(Connections(), 0u);
  // A listed address (here loopback itself) is served.
  server_->RunOnLoop([](StoreServer& s) { s.SetAllowlist(Only({"127.0.0.0/8"})); });
  StoreClient c = Connect();
  EXPECT_TRUE(c.Set("k", "v").ok());
  // With local_always (the agent's setting) loopback is always served.
  server_->RunOnLoop([](StoreServer& s) { s.SetAllowlist(Allowlist{}); });
  StoreClient d = Connect();
  EXPECT_EQ(*d.Get("k"), "v");
}

TEST_F(ServerTest, AHostThatLeavesTheListIsClosed) {
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("k", "v").ok());
  size_t closed = 0;
  server_->RunOnLoop([&](StoreServer& s) { closed = s.SetAllowlist(Only({"10.200.0.1"})); });
  EXPECT_EQ(closed, 1u);
  EXPECT_FALSE(c.Get("k").ok());
  EXPECT_EQ(Connections(), 0u);
}

// The c10d host's store before the first round: an agent that is no member
// yet may use the rendezvous's keys and nothing else.
TEST_F(ServerTest, StrangersReachOnlyThePrefix) {
  server_->RunOnLoop(
      [](StoreServer& s) { s.SetAllowlist(Only({"10.200.0.1"}, "/trun/rdzv/job/")); });
  StoreClient c = Connect();
  EXPECT_TRUE(c.Ping().ok());
  EXPECT_EQ(*c.Add("/trun/rdzv/job/seq", 1), 1);
  EXPECT_TRUE(c.Set("/trun/rdzv/job/node/1", "{}").ok());
  EXPECT_TRUE(*c.Check({"/trun/rdzv/job/node/1"}));
  EXPECT_TRUE(c.Wait({"/trun/rdzv/job/node/1"}, milliseconds(1000)).ok());
  EXPECT_FALSE(c.Get("/default_pg/0//cpu//0").ok());  // dropped
  EXPECT_TRUE(Eventually([&] { return Connections() == 0; }));
  // Keyless requests that read the whole store are refused too.
  for (int which = 0; which < 2; ++which) {
    StoreClient d = Connect();
    EXPECT_FALSE((which == 0 ? d.NumKeys().status() : d.ListKeys().status()).ok());
  }
  // A request naming one key outside among several inside is refused.
  StoreClient e = Connect();
  EXPECT_FALSE(e.MultiGet({"/trun/rdzv/job/seq", "/x"}).ok());
  uint64_t refused = 0;
  server_->RunOnLoop([&](StoreServer& s) { refused = s.num_refused(); });
  EXPECT_EQ(refused, 4u);
}

// The observer's connection ids tell where each change came from, as the
// store saw it at accept (issue 25: a round's hosts are these addresses).
TEST_F(ServerTest, PeerOfTellsWhereAnObservedChangeCameFrom) {
  std::atomic<uint64_t> seen{0};
  server_->RunOnLoop([&](StoreServer& s) {
    s.Observe(
        "/trun/", [&](uint64_t conn, const std::string&, const std::string&) { seen = conn; },
        [](uint64_t) {});
  });
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("/trun/rdzv/job/node/1", "{}").ok());
  ASSERT_TRUE(Eventually([&] { return seen != 0; }));
  std::optional<asio::ip::address> peer;
  server_->RunOnLoop([&](StoreServer& s) { peer = s.PeerOf(seen); });
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->to_string(), "127.0.0.1");
  server_->RunOnLoop([&](StoreServer& s) { peer = s.PeerOf(seen + 1000); });
  EXPECT_FALSE(peer.has_value());
}

// A round closes without a host: its agent's rendezvous connection (only
// rendezvous keys) stays, its workers' connections (other keys) close.
TEST_F(ServerTest, ALeavingMemberKeepsOnlyItsRendezvousConnection) {
  server_->RunOnLoop(
      [](StoreServer& s) { s.SetAllowlist(Only({"127.0.0.1"}, "/trun/rdzv/job/")); });
  StoreClient agent = Connect();
  StoreClient worker = Connect();
  ASSERT_TRUE(agent.Set("/trun/rdzv/job/node/1", "{}").ok());
  ASSERT_TRUE(worker.Set("/worker/attempt_0/k", "v").ok());
  ASSERT_EQ(*worker.Get("/worker/attempt_0/k"), "v");  // SET has no reply: wait for it
  ASSERT_EQ(*agent.Get("/trun/rdzv/job/node/1"), "{}");
  size_t closed = 0;
  server_->RunOnLoop(
      [&](StoreServer& s) { closed = s.SetAllowlist(Only({"10.200.0.1"}, "/trun/rdzv/job/")); });
  EXPECT_EQ(closed, 1u);
  EXPECT_TRUE(agent.Set("/trun/rdzv/job/ready/1", "1").ok());
  EXPECT_FALSE(worker.Get("/worker/attempt_0/k").ok());
  EXPECT_FALSE(agent.Get("/worker/attempt_0/k").ok());  // now a stranger
}

// Between two rounds the agent erases the workers' keys (torch 2.x's use
// no per-attempt prefix) and keeps the rendezvous's; the workers'
// connections close, the agents' stay.
TEST_F(ServerTest, ForgetLastRoundKeepsOnlyThePrefixAndClosesTheWorkers) {
  StoreClient agent = Connect();
  StoreClient worker = Connect();
  ASSERT_TRUE(agent.Set("/trun/rdzv/job/round/0", "r").ok());
  ASSERT_TRUE(worker.Set("/default_pg/0//cpu//0", "addr").ok());
  ASSERT_TRUE(worker.Set("/worker/attempt_0/k", "v").ok());
  ASSERT_TRUE(worker.QueuePush("/q", "item").ok());
  // SET and QUEUE_PUSH have no reply: a round trip makes sure the server
  // handled them before the loop erases.
  ASSERT_EQ(*worker.QueueLen("/q"), 1);
  size_t erased = 0;
  server_->RunOnLoop([&](StoreServer& s) { erased = s.ForgetLastRound("/trun/"); });
  EXPECT_EQ(erased, 3);
  EXPECT_EQ(*agent.NumKeys(), 1);
  EXPECT_EQ(*agent.Get("/trun/rdzv/job/round/0"), "r");
  EXPECT_FALSE(*agent.Check({"/default_pg/0//cpu//0"}));
  EXPECT_EQ(*agent.QueueLen("/q"), 0);
  EXPECT_FALSE(worker.Ping().ok());
}

// A dead worker's last request, still unread in its socket when the agent
// reaps it and starts the next round, never reaches the new round's keys.
TEST_F(ServerTest, ForgetLastRoundDoesNotReadWhatAWorkerSentBeforeIt) {
  StoreClient agent = Connect();
  StoreClient worker = Connect();
  ASSERT_TRUE(worker.Set("/default_pg/0//cpu//0", "round 0").ok());
  ASSERT_TRUE(worker.Ping().ok());
  server_->RunOnLoop([&](StoreServer& s) {
    // The loop is here, so the SET waits in the socket, unread.
    ASSERT_TRUE(worker.Set("/default_pg/0//cpu//1", "stale").ok());
    s.ForgetLastRound("/trun/");
  });
  EXPECT_TRUE(agent.Ping().ok());
  EXPECT_EQ(*agent.NumKeys(), 0);
}

TEST_F(ServerTest, WaitCompletesOnAnotherClientsSetAndAdd) {
  StoreClient waiter = Connect();
  std::thread setter([this] {
    std::this_thread::sleep_for(milliseconds(100));
    StoreClient c = Connect();
    ASSERT_TRUE(c.Set("x", "1").ok());
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(c.Add("y", 1).ok());
  });
  // Keys already present count as there; "x" twice counts once per mention.
  StoreClient other = Connect();
  ASSERT_TRUE(other.Set("present", "1").ok());
  EXPECT_TRUE(waiter.Wait({"present", "x", "y", "x"}, milliseconds(5000)).ok());
  setter.join();
  EXPECT_EQ(Waits(), 0u);
  EXPECT_EQ(WaitIndexEntries(), 0u);
}

TEST_F(ServerTest, ManyWaitersOnOneKeyWakeTogether) {
  constexpr int kWaiters = 50;
  std::vector<std::thread> threads;
  std::atomic<int> woken{0};
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      StoreClient c = Connect();
      if (c.Wait({"go"}, milliseconds(10000)).ok()) ++woken;
    });
  }
  ASSERT_TRUE(Eventually([&] { return Waits() == kWaiters; }));
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("go", "1").ok());
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken, kWaiters);
}

TEST_F(ServerTest, WaitTimesOutAndIsCancelled) {
  StoreClient c = Connect();
  Status s = c.Wait({"never"}, milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(Waits(), 0u);
  // The connection is still in step after the cancel.
  ASSERT_TRUE(c.Set("after", "ok").ok());
  EXPECT_EQ(*c.Get("after"), "ok");
}

TEST_F(ServerTest, CancelWaitGoldenBytesAndNoStaleReply) {
  Raw r(port());
  ASSERT_TRUE(r.Send(Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kWait) + U64(1) +
                     Str("k") + Op1(v2::kCancelWait)));
  EXPECT_EQ(r.Recv(1), std::string(1, kWaitCanceled));
  // The cancelled wait must not answer when its key appears: the next byte
  // on the stream is the PING's echo.
  StoreClient other = Connect();
  ASSERT_TRUE(other.Set("k", "v").ok());
  ASSERT_TRUE(r.Send(Op1(v2::kPing) + U32(0xABCD1234)));
  EXPECT_EQ(r.Recv(4), U32(0xABCD1234));
  // CANCEL_WAIT with nothing to cancel still answers.
  ASSERT_TRUE(r.Send(Op1(v2::kCancelWait)));
  EXPECT_EQ(r.Recv(1), std::string(1, kWaitCanceled));
}

TEST_F(ServerTest, CancelledWaitsDoNotPileUpInTheIndex) {
  StoreClient c = Connect();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(c.Wait({"never", "nor-this"}, milliseconds(0)).code(), StatusCode::kTimeout);
  }
  EXPECT_EQ(Waits(), 0u);
  EXPECT_LE(WaitIndexEntries(), 4u);
}

TEST_F(ServerTest, ADisconnectedWaiterIsForgotten) {
  {
    Raw r(port());
    ASSERT_TRUE(r.Send(Op1(v1::kWait) + U64(1) + Str("/gone")));
    ASSERT_TRUE(Eventually([&] { return Waits() == 1; }));
  }
  ASSERT_TRUE(Eventually([&] { return Waits() == 0; }));
  EXPECT_EQ(WaitIndexEntries(), 0u);
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("/gone", "1").ok());  // must not write to a closed socket
  EXPECT_TRUE(c.Ping().ok());
}

// The races of the store's own socket handling (issue 31): each case
// ends with every reply the client is owed, and the server still serving.

// A client that sends its last requests and closes its side in one go:
// the requests and the EOF may come in one read, and the replies must go
// out before the connection is dropped.
TEST_F(ServerTest, RequestsSentWithTheClientsEofAreAnswered) {
  for (int i = 0; i < 50; ++i) {
    Raw r(port());
    ASSERT_TRUE(r.Send(Op1(v1::kSet) + Str("/eof") + Str("v") + Op1(v1::kGet) + Str("/eof") +
                       Op1(v1::kAdd) + Str("/n") + U64(1)));
    r.EndWrites();
    EXPECT_EQ(r.Recv(9 + 8), Str("v") + U64(static_cast<uint64_t>(i) + 1)) << i;
    EXPECT_TRUE(r.Closed());
  }
  EXPECT_TRUE(Eventually([&] { return Connections() == 0; }));
}

// A reply far larger than the sockets' buffers, to a client that reads it
// slowly: the rest waits for the socket to be writable, and a WAIT woken
// meanwhile on another connection is answered at once.
TEST_F(ServerTest, AReplyLargerThanTheSocketBuffersReachesASlowReader) {
  Start({}, /*max_pending_reply_bytes=*/16 << 20);
  std::string value(6 << 20, 'x');
  for (size_t i = 0; i < value.size(); i += 4096) value[i] = static_cast<char>('a' + i / 4096 % 26);
  StoreClient setter = Connect();
  ASSERT_TRUE(setter.Set("/big", value).ok());
  // A SET is not answered: the PING's answer, after it on the same
  // connection, says the 6 MiB were stored (a GET before that found no key).
  ASSERT_TRUE(setter.Ping().ok());
  Raw slow(port());
  slow.SmallReceiveBuffer();
  Raw waiter(port());
  ASSERT_TRUE(waiter.Send(Op1(v1::kWait) + U64(1) + Str("/later")));
  ASSERT_TRUE(Eventually([&] { return Waits() == 1; }));
  ASSERT_TRUE(slow.Send(Op1(v1::kGet) + Str("/big")));
  EXPECT_EQ(slow.Recv(8 + 4096), U64(value.size()) + value.substr(0, 4096));
  std::this_thread::sleep_for(milliseconds(100));  // the server meets a full socket
  ASSERT_TRUE(setter.Set("/later", "1").ok());
  EXPECT_EQ(waiter.Recv(1), Op1(kWaitStopWaiting));
  std::string rest = slow.Recv(value.size() - 4096, 20000);
  ASSERT_EQ(rest.size(), value.size() - 4096);
  EXPECT_TRUE(rest == value.substr(4096));
  ASSERT_TRUE(slow.Send(Op1(v1::kGetNumKeys)));
  EXPECT_EQ(slow.Recv(8), U64(2));
}

// Clients that close while their WAITs are pending, half of many: the
// others' WAITs are all answered when the key comes.
TEST_F(ServerTest, WaitersThatCloseLeaveTheOthersAnswered) {
  constexpr int kClients = 200;
  std::vector<std::unique_ptr<Raw>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Raw>(port()));
    ASSERT_TRUE(clients.back()->Send(Op1(v1::kWait) + U64(1) + Str("/k")));
  }
  ASSERT_TRUE(Eventually([&] { return Waits() == kClients; }));
  for (int i = 0; i < kClients; i += 2) clients[i].reset();
  StoreClient setter = Connect();
  ASSERT_TRUE(setter.Set("/k", "1").ok());
  for (int i = 1; i < kClients; i += 2) EXPECT_EQ(clients[i]->Recv(1), Op1(kWaitStopWaiting)) << i;
  EXPECT_TRUE(Eventually([&] { return Waits() == 0; }));
  EXPECT_TRUE(setter.Ping().ok());
}

// The bytes torch 1.13's client sends and expects, v1 numbering.
TEST_F(ServerTest, V1SessionGoldenReplies) {
  Raw r(port());
  ASSERT_TRUE(r.connected());
  // The opcode alone first, as torch 1.13 sends it.
  ASSERT_TRUE(r.Send(Op1(v1::kAdd)));
  ASSERT_TRUE(r.Send(Str("init/") + U64(1)));
  EXPECT_EQ(r.Recv(8), U64(1));
  ASSERT_TRUE(r.Send(Op1(v1::kSet) + Str("/a") + Str("hi")));
  ASSERT_TRUE(r.Send(Op1(v1::kWait) + U64(1) + Str("/a") + Op1(v1::kGet) + Str("/a")));
  EXPECT_EQ(r.Recv(1 + 8 + 2), Op1(kWaitStopWaiting) + Str("hi"));
  ASSERT_TRUE(r.Send(Op1(v1::kGet) + Str("/missing")));
  EXPECT_EQ(r.Recv(8), U64(0));  // empty, as the libuv server
  ASSERT_TRUE(r.Send(Op1(v1::kCompareSet) + Str("/c") + Str("") + Str("x")));
  EXPECT_EQ(r.Recv(9), Str("x"));
  ASSERT_TRUE(r.Send(Op1(v1::kCheck) + U64(2) + Str("/a") + Str("/zz")));
  EXPECT_EQ(r.Recv(1), Op1(kCheckNotReady));
  ASSERT_TRUE(r.Send(Op1(v1::kGetNumKeys)));
  EXPECT_EQ(r.Recv(8), U64(3));  // init/, /a, /c
  ASSERT_TRUE(r.Send(Op1(v1::kDeleteKey) + Str("/c") + Op1(v1::kDeleteKey) + Str("/c")));
  EXPECT_EQ(r.Recv(16), U64(1) + U64(0));
}

// torch 1.13 opens a second connection per client for watchKey callbacks.
TEST_F(ServerTest, V1WatchKeyEvents) {
  Raw watch(port());
  ASSERT_TRUE(watch.Send(Op1(v1::kWatchKey) + Str("/w")));
  EXPECT_EQ(watch.Recv(1), Op1(kWatchCallbackRegistered));
  Raw main(port());
  ASSERT_TRUE(main.Send(Op1(v1::kSet) + Str("/w") + Str("1")));
  EXPECT_EQ(watch.Recv(1 + 10 + 8 + 9), Op1(kWatchKeyCreated) + Str("/w") + Str("") + Str("1"));
  ASSERT_TRUE(main.Send(Op1(v1::kAdd) + Str("/w") + U64(1)));
  EXPECT_EQ(watch.Recv(1 + 10 + 9 + 9), Op1(kWatchKeyUpdated) + Str("/w") + Str("1") + Str("2"));
  ASSERT_TRUE(main.Send(Op1(v1::kAppend) + Str("/w") + Str("x")));
  EXPECT_EQ(watch.Recv(1 + 10 + 9 + 10), Op1(kWatchKeyAppended) + Str("/w") + Str("2") + Str("2x"));
  ASSERT_TRUE(main.Send(Op1(v1::kDeleteKey) + Str("/w")));
  EXPECT_EQ(watch.Recv(1 + 10 + 10 + 8), Op1(kWatchKeyDeleted) + Str("/w") + Str("2x") + Str(""));
  // Other keys are not reported.
  ASSERT_TRUE(main.Send(Op1(v1::kSet) + Str("/other") + Str("1")));
  EXPECT_EQ(main.Recv(8 + 8), U64(2) + U64(1));  // ADD's and DELETE's replies only
  EXPECT_EQ(main.Recv(1, 200), "");
  EXPECT_EQ(watch.Recv(1, 200), "");
}

TEST_F(ServerTest, V2QueueGoldenReplies) {
  Raw r(port());
  ASSERT_TRUE(r.Send(Op1(v2::kValidate) + U32(kValidationMagic)));
  ASSERT_TRUE(r.Send(Op1(v2::kQueuePop) + Str("q")));
  EXPECT_EQ(r.Recv(8), U64(0));  // empty: i64 0 and nothing else
  ASSERT_TRUE(r.Send(Op1(v2::kQueuePush) + Str("q") + Str("one") + Op1(v2::kQueuePush) + Str("q") +
                     Str("two") + Op1(v2::kQueueLen) + Str("q")));
  EXPECT_EQ(r.Recv(8), U64(2));
  ASSERT_TRUE(r.Send(Op1(v2::kCheck) + U64(1) + Str("q")));
  EXPECT_EQ(r.Recv(1), Op1(kCheckReady));  // a non-empty queue counts as a key
  ASSERT_TRUE(r.Send(Op1(v2::kQueuePop) + Str("q")));
  EXPECT_EQ(r.Recv(8 + 11), U64(2) + Str("one"));  // i64 length before the pop, then the item
  ASSERT_TRUE(r.Send(Op1(v2::kQueuePop) + Str("q")));
  EXPECT_EQ(r.Recv(8 + 11), U64(1) + Str("two"));
  ASSERT_TRUE(r.Send(Op1(v2::kQueueLen) + Str("q") + Op1(v2::kGetNumKeys)));
  EXPECT_EQ(r.Recv(16), U64(0) + U64(0));  // queues are not keys
}

TEST_F(ServerTest, QueuePushWakesOneBlockingPop) {
  // A blocking pop is WAIT, then QUEUE_POP: one item must wake one waiter.
  Raw a(port()), b(port());
  size_t waiting = 0;
  for (Raw* r : {&a, &b}) {
    ASSERT_TRUE(r->Send(Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kWait) + U64(1) +
                        Str("jobs")));
    // a's WAIT parked before b's is sent: connections are served apart.
    ++waiting;
    ASSERT_TRUE(Eventually([&] { return Waits() == waiting; }));
  }
  std::string push;
  PutU8(push, v2::kQueuePush);
  PutBytes(push, "jobs");
  PutBytes(push, "j1");
  Raw pusher(port());
  ASSERT_TRUE(pusher.Send(Op1(v2::kValidate) + U32(kValidationMagic) + push));
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));  // the first to wait
  EXPECT_EQ(b.Recv(1, 200), "");
  EXPECT_EQ(Waits(), 1u);
  ASSERT_TRUE(pusher.Send(push));
  EXPECT_EQ(b.Recv(1), Op1(kWaitStopWaiting));
}

// Reads LIST_KEYS' reply: i64 count, then the keys as bytes; sorted, since
// the store gives them in no particular order.
std::vector<std::string> RecvKeyList(Raw& r) {
  std::string n = r.Recv(8);
  if (n.size() != 8) return {"<no count>"};
  uint64_t count;
  std::memcpy(&count, n.data(), 8);
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < count; ++i) {
    std::string len = r.Recv(8);
    if (len.size() != 8) return {"<short>"};
    uint64_t l;
    std::memcpy(&l, len.data(), 8);
    keys.push_back(r.Recv(l));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST_F(ServerTest, V2ListKeysGoldenReplies) {
  Raw r(port());
  ASSERT_TRUE(r.Send(Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kListKeys)));
  EXPECT_EQ(r.Recv(8), U64(0));  // an empty store: the count alone
  ASSERT_TRUE(r.Send(Op1(v2::kSet) + Str("/a") + Str("1") + Op1(v2::kListKeys)));
  EXPECT_EQ(r.Recv(8 + 10), U64(1) + Str("/a"));  // as torch 2.14's server answered it
  // Every key, `init/` included (torch's client drops what lacks its "/");
  // queues are not keys; a deleted key is gone.
  ASSERT_TRUE(r.Send(Op1(v2::kAdd) + Str("init/") + U64(1) + Op1(v2::kQueuePush) + Str("/q") +
                     Str("x") + Op1(v2::kSet) + Str("/gone") + Str("") + Op1(v2::kDeleteKey) +
                     Str("/gone") + Op1(v2::kSet) + Str(std::string("/\0\xff", 3)) + Str("") +
                     Op1(v2::kListKeys)));
  EXPECT_EQ(r.Recv(16), U64(1) + U64(1));  // ADD's and DELETE_KEY's replies
  EXPECT_EQ(RecvKeyList(r), (std::vector<std::string>{std::string("/\0\xff", 3), "/a", "init/"}));
}

TEST_F(ServerTest, ListKeysWithTheClient) {
  StoreClient c = Connect();
  EXPECT_EQ(*c.ListKeys(), std::vector<std::string>{});
  ASSERT_TRUE(c.MultiSet({{"/x", "1"}, {"/y", "2"}}).ok());
  auto keys = *c.ListKeys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"/x", "/y"}));
}

// BARRIER as torch 2.14's client sends it: key, i64 world size; u8 0 when
// the world has arrived. The count lives at the key as decimal ASCII.
TEST_F(ServerTest, V2BarrierGoldenReplies) {
  Raw a(port()), b(port()), c(port());
  for (Raw* r : {&a, &b, &c}) ASSERT_TRUE(r->Send(Op1(v2::kValidate) + U32(kValidationMagic)));
  ASSERT_TRUE(a.Send(Op1(v2::kBarrier) + Str("/b") + U64(3)));
  ASSERT_TRUE(b.Send(Op1(v2::kBarrier) + Str("/b") + U64(3)));
  EXPECT_TRUE(Eventually([&] { return Waits() == 2; }));
  EXPECT_EQ(a.Recv(1, 200), "");
  ASSERT_TRUE(c.Send(Op1(v2::kGet) + Str("/b")));
  EXPECT_EQ(c.Recv(9), Str("2"));
  ASSERT_TRUE(c.Send(Op1(v2::kBarrier) + Str("/b") + U64(3)));
  EXPECT_EQ(c.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(b.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(Waits(), 0u);
  EXPECT_EQ(WaitIndexEntries(), 0u);
  // A later arrival on a complete barrier passes at once; so does a world
  // of one, or a world size below 1.
  ASSERT_TRUE(a.Send(Op1(v2::kBarrier) + Str("/b") + U64(3) + Op1(v2::kBarrier) + Str("/one") +
                     U64(1) + Op1(v2::kBarrier) + Str("/none") + U64(uint64_t(-5)) + Op1(v2::kGet) +
                     Str("/b")));
  EXPECT_EQ(a.Recv(3 + 9), std::string(3, kWaitStopWaiting) + Str("4"));
}

TEST_F(ServerTest, BarrierSharesTheWaitIndexAsInTorch) {
  // A WAIT on the barrier's key, before anyone arrives, is answered when the
  // barrier completes, not at the first arrival (whose count makes the key
  // exist): torch's servers wake the key's waiters only then. A SET of the
  // key releases the barrier's waiters, as in torch.
  Raw w(port()), a(port()), b(port());
  for (Raw* r : {&w, &a, &b}) ASSERT_TRUE(r->Send(Op1(v2::kValidate) + U32(kValidationMagic)));
  ASSERT_TRUE(w.Send(Op1(v2::kWait) + U64(1) + Str("/k")));
  // The WAIT must be parked before the first arrival makes the key exist:
  // the connections are served independently, and a WAIT on a key that
  // exists is answered at once.
  ASSERT_TRUE(Eventually([&] { return Waits() == 1; }));
  ASSERT_TRUE(a.Send(Op1(v2::kBarrier) + Str("/k") + U64(2)));
  EXPECT_TRUE(Eventually([&] { return Waits() == 2; }));
  EXPECT_EQ(w.Recv(1, 200), "");
  ASSERT_TRUE(b.Send(Op1(v2::kBarrier) + Str("/k") + U64(2)));
  EXPECT_EQ(b.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(w.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));

  ASSERT_TRUE(a.Send(Op1(v2::kBarrier) + Str("/s") + U64(5)));
  EXPECT_TRUE(Eventually([&] { return Waits() == 1; }));
  ASSERT_TRUE(b.Send(Op1(v2::kSet) + Str("/s") + Str("7")));
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));
}

TEST_F(ServerTest, BarrierTimesOutAndIsCancelled) {
  StoreClient c = Connect();
  Status s = c.Barrier("/late", 2, milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_EQ(Waits(), 0u);
  EXPECT_EQ(*c.Get("/late"), "1");  // the arrival still counts, as in torch
  StoreClient d = Connect();
  EXPECT_TRUE(d.Barrier("/late", 2, milliseconds(1000)).ok());
  // On a key that is not a count: dropped, as ADD to one.
  ASSERT_TRUE(d.Set("/text", "abc").ok());
  EXPECT_FALSE(d.Barrier("/text", 2, milliseconds(1000)).ok());
  StoreClient e = Connect();
  EXPECT_TRUE(e.Ping().ok());
}

TEST_F(ServerTest, ManyClientsPassABarrierTogether) {
  constexpr int kClients = 32;
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      StoreClient c = Connect();
      if (c.Barrier("/all", kClients, milliseconds(10000)).ok()) ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed, kClients);
  EXPECT_EQ(Waits(), 0u);
}

// torch 2.x's Debian build (no libuv) refuses queues in its client, so trun's
// client drives them here as torch's libuv-backed client would.
TEST_F(ServerTest, QueuesWithTheClient) {
  StoreClient c = Connect();
  EXPECT_EQ(*c.QueueLen("/q"), 0);
  EXPECT_EQ(c.QueuePop("/q", false).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c.QueuePush("/q", "one").ok());
  ASSERT_TRUE(c.QueuePush("/q", std::string("t\0o", 3)).ok());
  EXPECT_EQ(*c.QueueLen("/q"), 2);
  EXPECT_EQ(*c.QueuePop("/q", false), "one");
  EXPECT_EQ(*c.QueuePop("/q", true), std::string("t\0o", 3));
  std::thread pusher([this] {
    std::this_thread::sleep_for(milliseconds(100));
    StoreClient p = Connect();
    ASSERT_TRUE(p.QueuePush("/q", "late").ok());
  });
  EXPECT_EQ(*c.QueuePop("/q", true), "late");  // a blocking pop waits for the push
  pusher.join();
  EXPECT_EQ(*c.QueueLen("/q"), 0);
}

TEST_F(ServerTest, RepliesLeftUnreadAreHeldToABudgetOverAllConnections) {
  // Each connection may queue 16 MiB of replies, all together 8 MiB. Six
  // clients ask for a 6 MiB value twice and never read: the first reply,
  // less what their sockets took (4 MiB at most), waits for each (the
  // second GET waits behind it), over the budget: those whose replies sat
  // unread longest are closed (at once over twice the budget, else once
  // they sat a second, by the sweep, as nobody reads meanwhile) until the
  // rest fit; a reader is served meanwhile and after.
  Start({}, /*max_pending_reply_bytes=*/16 << 20, "", kDefaultMaxBufferedBytes,
        /*max_queued_reply_bytes=*/8 << 20);
  const std::string value(6 << 20, 'v');
  StoreClient setter = Connect();
  ASSERT_TRUE(setter.Set("/big", value).ok());
  ASSERT_TRUE(setter.Ping().ok());
  std::vector<Raw> hogs;
  for (int i = 0; i < 6; ++i) {
    hogs.emplace_back(port());
    hogs.back().SmallReceiveBuffer();
    ASSERT_TRUE(hogs.back().Send(Op1(v1::kGet) + Str("/big") + Op1(v1::kGet) + Str("/big")));
  }
  EXPECT_TRUE(*setter.Get("/big") == value);
  auto queued = [&] {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.queued_reply_bytes(); });
    return n;
  };
  // Each hog holds what its socket would not take (how much the kernel's
  // buffers took varies): under the budget soon, with hogs closed.
  EXPECT_TRUE(Eventually([&] { return queued() <= (8u << 20) && Connections() < 1 + 6; }))
      << queued() << " bytes queued, " << Connections() << " connections";
  StoreClient reader = Connect();
  EXPECT_TRUE(*reader.Get("/big") == value);
}

TEST_F(ServerTest, AClientThatDoesNotReadItsRepliesIsHeldBackAndLosesNothing) {
  // One write of 40 GETs of a 2 MiB value, nothing read: the store handles
  // them only as their replies drain, so it holds about one reply, not 40
  // (80 MiB, more than the connection may queue: before, the client was
  // dropped after its 32nd GET's copy); another client is served
  // meanwhile; once the client reads, every reply comes, whole and in
  // order.
  Start({}, kDefaultMaxBufferedBytes, "", kDefaultMaxBufferedBytes,
        /*max_queued_reply_bytes=*/1024 << 20);
  const std::string value(2 << 20, 'v');
  StoreClient setter = Connect();
  ASSERT_TRUE(setter.Set("/big", value).ok());
  ASSERT_TRUE(setter.Set("/small", "s").ok());
  ASSERT_TRUE(setter.Ping().ok());  // SET has no reply: both are stored now
  Raw hog(port());
  hog.SmallReceiveBuffer();
  std::string gets;
  for (int i = 0; i < 40; ++i) gets += Op1(v1::kGet) + Str("/big");
  ASSERT_TRUE(hog.Send(gets));
  auto queued = [&] {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.queued_reply_bytes(); });
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return queued() > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(queued(), kHoldBackReplyBytes + value.size());
  EXPECT_EQ(*setter.Get("/small"), "s");
  const std::string reply = U64(value.size()) + value;
  // Not ASSERT_EQ: a mismatch would print 2 MiB twice.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(hog.Recv(reply.size()) == reply) << "reply " << i;
  EXPECT_EQ(queued(), 0u);
  ASSERT_TRUE(hog.Send(Op1(v1::kGet) + Str("/small")));
  EXPECT_EQ(hog.Recv(9), U64(1) + "s");
}

TEST_F(ServerTest, AClientHeldBackIsStillReadAndNeitherStallsNorIsClosed) {
  // A client writes a GET of a 7 MiB value, a 7 MiB SET and a PING before
  // it reads anything: its write of the SET fits no socket until the store
  // reads on, which a held-back client's store still does, so both finish.
  // Then it pipelines 4 GETs of the value and reads them slowly, over more
  // than the rate floor's window for unfinished requests (10 s): a held-back
  // client's requests wait for the store, not for it, and it is not closed.
  // But what it sends behind replies it does not read is bounded.
  Start({}, kDefaultMaxBufferedBytes, "", kDefaultMaxBufferedBytes);
  const std::string value(7 << 20, 'v');
  StoreClient setter = Connect();
  ASSERT_TRUE(setter.Set("/big", value).ok());
  ASSERT_TRUE(setter.Ping().ok());
  Raw client(port());
  std::thread writer([&] {
    EXPECT_TRUE(client.Send(Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kGet) +
                            Str("/big") + Op1(v2::kSet) + Str("/x") +
                            Str(std::string(7 << 20, 'x')) + Op1(v2::kPing) + U32(5)));
  });
  const std::string reply = U64(value.size()) + value;
  EXPECT_TRUE(client.Recv(reply.size()) == reply);
  EXPECT_EQ(client.Recv(4), U32(5));
  writer.join();
  ASSERT_TRUE(client.Send(Op1(v2::kGet) + Str("/big") + Op1(v2::kGet) + Str("/big") +
                          Op1(v2::kGet) + Str("/big") + Op1(v2::kGet) + Str("/big")));
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ASSERT_TRUE(client.Recv(reply.size()) == reply) << "reply " << i;
  }
  // What a client may send behind replies it does not read is bounded as
  // what a parser buffers is (Limits): past it, the client is closed.
  Raw hog(port());
  hog.SmallReceiveBuffer();
  ASSERT_TRUE(hog.Send(Op1(v1::kGet) + Str("/big")));
  const std::string set = Op1(v1::kSet) + Str("/y") + Str(std::string(1 << 20, 'y'));
  bool closed = false;
  for (int i = 0; i < 80 && !closed; ++i) closed = !hog.Send(set);
  EXPECT_TRUE(closed || hog.Closed());
  EXPECT_TRUE(setter.Ping().ok());
}

TEST_F(ServerTest, ALinkWhoseHandshakeAnswerFailsLeavesNoLink) {
  // A relay's handshake, then a reset before the store answers: the
  // answer's write fails, the store drops the connection, and no link is
  // left behind to count (trun_store_links) or to point at it.
  Start({});
  const std::string handshake = Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kCompareSet) +
                                Str(kLinkKey) + Str("") + Str(kLinkVersion);
  const StoreStats before = ProcessStoreStats();
  for (int i = 0; i < 50; ++i) {
    Raw r(port());
    // With the store's loop held, the handshake and the reset are both
    // there when it next reads.
    server_->RunOnLoop([&](StoreServer&) {
      ASSERT_TRUE(r.Send(handshake));
      r.Reset();
    });
  }
  EXPECT_TRUE(Eventually([&] { return Connections() == 0; }));
  const StoreStats after = ProcessStoreStats();
  EXPECT_EQ(after.links_opened - before.links_opened, after.links_closed - before.links_closed);
}

TEST_F(ServerTest, RepliesOverTheReplyLimitAreRefusedBeforeTheyAreBuilt) {
  // A MULTI_GET naming one large value many times, or a LIST_KEYS of many
  // long keys, asks for a reply far larger than its request: it is refused
  // from its size, before it is built, and the client dropped.
  Start({}, /*max_pending_reply_bytes=*/64 * 1024);
  StoreClient c = Connect();
  ASSERT_TRUE(c.Set("/big", std::string(16 * 1024, 'v')).ok());
  std::string request = Op1(v2::kMultiGet) + U64(1000);
  for (int i = 0; i < 1000; ++i) request += Str("/big");
  Raw r(port());
  ASSERT_TRUE(r.Send(Op1(v2::kValidate) + U32(kValidationMagic) + request));
  EXPECT_TRUE(r.Closed());
  EXPECT_EQ(c.MultiGet({"/big", "/big"})->size(), 2u);  // within the limit: served
  for (int i = 0; i < 16; ++i)
    ASSERT_TRUE(c.Set("/" + std::string(4096, 'k') + std::to_string(i), "").ok());
  EXPECT_FALSE(c.ListKeys().ok());
  StoreClient d = Connect();
  EXPECT_TRUE(d.Ping().ok());
}

TEST_F(ServerTest, GarbageDropsOnlyThatClient) {
  StoreClient good = Connect();
  for (const std::string& junk : {
           std::string(64, '\xff'),                               // unknown opcode
           Op1(v1::kSet) + U64(uint64_t{1} << 60),                // 2^60-byte key
           Op1(v1::kSet) + Str("k") + U64(uint64_t{1} << 62),     // 2^62-byte value
           Op1(v1::kWait) + U64(uint64_t{1} << 40),               // 2^40 keys
           Op1(v2::kValidate) + U32(kValidationMagic) + Op1(99),  // unknown v2 opcode
           Op1(v2::kValidate) + U32(kValidationMagic) + Op1(v2::kBarrier) +
               U64(uint64_t{1} << 50),             // BARRIER with a 2^50-byte key
           std::string("GET / HTTP/1.0\r\n\r\n"),  // a port scanner
           Op1(v1::kSet) + Str("n") + Str("x") + Op1(v1::kAdd) + Str("n") + U64(1),  // ADD to text
       }) {
    Raw r(port());
    ASSERT_TRUE(r.Send(junk));
    EXPECT_TRUE(r.Closed()) << "junk of " << junk.size() << " bytes";
  }
  ASSERT_TRUE(good.Set("still", "here").ok());
  EXPECT_EQ(*good.Get("still"), "here");
  // A client stopped mid-message and an idle one hold nothing up.
  Raw half(port()), idle(port());
  ASSERT_TRUE(half.Send(Op1(v1::kSet) + U64(5) + "ab"));
  StoreClient another = Connect();
  EXPECT_EQ(*another.Get("still"), "here");
}

TEST_F(ServerTest, AClientOverTheBufferCapIsDropped) {
  Limits limits;
  limits.max_buffered_bytes = 64 * 1024;
  Start(limits);
  Raw r(port());
  // A value under the value limit, but more than this connection may hold.
  std::string big = Op1(v1::kSet) + Str("k") + U64(1 << 20) + std::string(128 * 1024, 'v');
  r.Send(big);
  EXPECT_TRUE(r.Closed());
  StoreClient c = Connect();
  EXPECT_TRUE(c.Ping().ok());
}

TEST_F(ServerTest, TrunKeysWithoutTheTokenAreRefusedBeforeTheirValueIsRead) {
  server_->RunOnLoop([](StoreServer& s) { s.RequireJobToken("job-token"); });
  const std::string v2 = Op1(v2::kValidate) + U32(kValidationMagic);
  // Each announces an 8 MiB value and sends none of it: judged by its key
  // alone, it is closed without the store waiting for (or holding) the value.
  for (const std::string& head : {
           Op1(v1::kSet) + Str("/trun/rdzv/r/end/0") + U64(8 << 20),
           Op1(v1::kMultiSet) + U64(1) + Str("/trun/rdzv/r/seq") + U64(8 << 20),
           v2 + Op1(v2::kSet) + Str("/trun/rdzv/r/end/0") + U64(8 << 20),
           v2 + Op1(v2::kAppend) + Str("/trun/rdzv/r/node/1") + U64(8 << 20),
           v2 + Op1(v2::kQueuePush) + Str("/trun/q") + U64(8 << 20),
           v2 + Op1(v2::kCompareSet) + Str("/trun/rdzv/r/end/0") + U64(8 << 20),
       }) {
    Raw r(port());
    ASSERT_TRUE(r.Send(head));
    EXPECT_TRUE(r.Closed()) << head.substr(0, 24);
  }
  // A worker's key with the same head waits for its value, as any TCPStore.
  Raw worker(port());
  ASSERT_TRUE(worker.Send(Op1(v1::kSet) + Str("/worker/k") + U64(4) + "ab"));
  EXPECT_FALSE(worker.Closed(300));
  ASSERT_TRUE(worker.Send("cd"));
  StoreClient c = Connect();
  EXPECT_EQ(*c.Get("/worker/k"), "abcd");
}

TEST_F(ServerTest, UnfinishedRequestsOverTheBudgetCloseTheOneThatStalled) {
  Start({}, /*max_pending_reply_bytes=*/4 << 20, "", /*max_partial_bytes=*/2 << 20);
  auto head = [](const std::string& key) { return Op1(v1::kSet) + Str(key) + U64(1536 * 1024); };
  const std::string part(1200 * 1024, 'v');
  auto held = [&] {
    size_t n = 0;
    server_->RunOnLoop([&](StoreServer& s) { n = s.connection_buffer_bytes(); });
    return n;
  };
  Raw stalled(port()), streaming(port());
  ASSERT_TRUE(stalled.Send(head("/w/stalled") + part));
  ASSERT_TRUE(Eventually([&] { return held() >= part.size(); }));
  // 2.4 MiB unfinished: over the budget. The one that waited longest for a
  // byte goes; the one still streaming finishes its SET.
  ASSERT_TRUE(streaming.Send(head("/w/streaming") + part));
  EXPECT_TRUE(stalled.Closed());
  ASSERT_TRUE(streaming.Send(std::string(1536 * 1024 - part.size(), 'v')));
  StoreClient c = Connect();
  EXPECT_EQ(c.Get("/w/streaming")->size(), 1536u * 1024);
  auto stalled_set = c.Check({"/w/stalled"});
  ASSERT_TRUE(stalled_set.ok());
  EXPECT_FALSE(*stalled_set);
}

TEST_F(ServerTest, AtTheConnectionCapTheOldestSilentOneGivesWay) {
  server_.reset();
  ServerOptions options = Options("127.0.0.1", 0);
  options.max_connections = 6;
  auto s = StoreServerThread::Start(options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  server_ = std::move(*s);
  StoreClient speaking = Connect();
  ASSERT_TRUE(speaking.Set("k", "v").ok());
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(std::make_unique<Raw>(port()));
  ASSERT_TRUE(Eventually([&] { return Connections() == 6; }));
  // Full: each newcomer closes the oldest connection that sent nothing.
  StoreClient newcomer = Connect();
  EXPECT_EQ(*newcomer.Get("k"), "v");
  EXPECT_TRUE(idle[0]->Closed());
  StoreClient another = Connect();
  EXPECT_EQ(*another.Get("k"), "v");
  EXPECT_TRUE(idle[1]->Closed());
  EXPECT_FALSE(idle[2]->Closed(100));
  // The one that spoke first is never the one to go.
  EXPECT_EQ(*speaking.Get("k"), "v");
}

TEST_F(ServerTest, AClientThatNeverReadsIsDropped) {
  Start({}, /*max_pending_reply_bytes=*/64 * 1024);
  Raw r(port());
  // 1 MiB of GETNUMKEYS asks for 1M replies of 8 bytes; the client reads
  // none. The kernel's buffers fill, then the server's queue, then it drops.
  std::string flood(1 << 20, static_cast<char>(v1::kGetNumKeys));
  for (int i = 0; i < 16; ++i) {
    if (!r.Send(flood)) break;
  }
  EXPECT_TRUE(Eventually([&] { return Connections() == 0; }));
  StoreClient c = Connect();
  EXPECT_TRUE(c.Ping().ok());
}

TEST_F(ServerTest, ConnectionsGiveBackBuffersGrownForALargeValue) {
  // Every client SETs and GETs a 512 KiB value once, then idles: each
  // connection's input and reply buffers must shrink back, or thousands of
  // idle ranks would hold a copy or two of the value each.
  constexpr int kClients = 8;
  std::string value(512 * 1024, 'v');
  std::vector<StoreClient> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(Connect());
    ASSERT_TRUE(clients.back().Set("big", value).ok());
    EXPECT_EQ(*clients.back().Get("big"), value);
  }
  // The last reply's write completes on the server's loop a moment after
  // the client has read it.
  size_t bytes = 0;
  EXPECT_TRUE(Eventually([&] {
    server_->RunOnLoop([&](StoreServer& s) { bytes = s.connection_buffer_bytes(); });
    return bytes == 0;
  })) << bytes;
}

TEST_F(ServerTest, PipelinedRequestsLongerThanOneReadAreAllServed) {
  // 20000 GETNUMKEYS in one write: far more than a connection's own read
  // buffer, read through the shared one; every reply comes, in order.
  Raw r(port());
  constexpr int kRequests = 20000;
  ASSERT_TRUE(r.Send(std::string(kRequests, static_cast<char>(v1::kGetNumKeys))));
  std::string replies = r.Recv(8 * kRequests);
  ASSERT_EQ(replies.size(), 8u * kRequests);
  EXPECT_EQ(replies, [] {
    std::string s;
    for (int i = 0; i < kRequests; ++i) s += U64(0);
    return s;
  }());
}

TEST_F(ServerTest, DualStackListensOnIpv4AndIpv6) {
  Start({}, 1 << 20, "::");
  Raw v4(port());
  EXPECT_TRUE(v4.connected());
  ASSERT_TRUE(v4.Send(Op1(v1::kGetNumKeys)));
  EXPECT_EQ(v4.Recv(8), U64(0));
  Raw v6(port(), /*v6=*/true);
  if (!v6.connected()) GTEST_SKIP() << "no IPv6 loopback here";
  ASSERT_TRUE(v6.Send(Op1(v1::kGetNumKeys)));
  EXPECT_EQ(v6.Recv(8), U64(0));
}

TEST_F(ServerTest, ThousandsOfConnections) {
  constexpr int kClients = 2000;
  auto start = std::chrono::steady_clock::now();
  std::vector<StoreClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(Connect());
    ASSERT_TRUE(clients.back().Add("count", 1).ok()) << i;
  }
  EXPECT_EQ(*clients.front().Add("count", 0), kClients);
  EXPECT_EQ(Connections(), static_cast<size_t>(kClients));
  // Every connection is still live and served.
  for (auto& c : clients) ASSERT_TRUE(c.Check({"count"}).ok());
  auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  RecordProperty("ms", static_cast<int>(ms.count()));
}

TEST(ServerStartTest, BadHostAndBusyPort) {
  ServerOptions bad;
  bad.host = "not-an-ip";
  auto s = StoreServerThread::Start(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);

  ServerOptions first;
  first.host = "127.0.0.1";
  auto a = StoreServerThread::Start(first);
  ASSERT_TRUE(a.ok());
  ServerOptions second = first;
  second.port = (*a)->port();
  auto b = StoreServerThread::Start(second);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kIOError);
}

TEST(ClientTest, ConnectGivesUpAtTheDeadline) {
  auto c = StoreClient::Connect("127.0.0.1", 1, milliseconds(300));
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
}

// Issue 25: a process on the port that closes every handshake (torch 1.13's
// own server resets at VALIDATE's bytes; here a store that refuses the
// client at accept) is named at once, not retried until the deadline.
TEST(ClientTest, AServerThatClosesEveryHandshakeIsNamedAtOnce) {
  auto s = StoreServerThread::Start(Options("127.0.0.1", 0));
  ASSERT_TRUE(s.ok());
  (*s)->RunOnLoop([](StoreServer& server) { server.SetAllowlist(Only({"10.200.0.1"})); });
  auto start = std::chrono::steady_clock::now();
  auto c = StoreClient::Connect("127.0.0.1", (*s)->port(), milliseconds(60000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(c.status().message().find("another process holds the port?"), std::string::npos)
      << c.status().message();
}

TEST(ClientTest, ConnectWaitsForALateServer) {
  // Find a free port, then start the server on it after the client tries.
  int port;
  {
    auto probe = StoreServerThread::Start(Options("127.0.0.1", 0));
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  std::unique_ptr<StoreServerThread> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    auto s = StoreServerThread::Start(Options("127.0.0.1", port));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    late = std::move(*s);
  });
  auto c = StoreClient::Connect("127.0.0.1", port, milliseconds(10000), milliseconds(5000));
  starter.join();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->Ping().ok());
}

}  // namespace
}  // namespace trun::store
