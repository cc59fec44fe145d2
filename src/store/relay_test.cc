#include "store/relay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "store/auth.h"
#include "store/client.h"
#include "store/golden_bytes.h"
#include "store/link.h"
#include "store/raw_socket.h"
#include "store/server.h"
#include "store/server_thread.h"

namespace trun::store {
namespace {

using golden::Op1;
using golden::RawSocket;
using golden::Str;
using golden::U32;
using golden::U64;
using std::chrono::milliseconds;

const std::string kRelayToken = "relay-test-token-0123456789";

std::string V2(const std::string& request) {
  return Op1(v2::kValidate) + U32(kValidationMagic) + request;
}

// ---- pure logic --------------------------------------------------------------

TEST(RelayAddTest, BatchedValuesAreDistinctAndContiguous) {
  // Five ADDs of 1 sent up as one ADD of 5, which the store answered 12:
  // they are 8..12, in their order of arrival.
  EXPECT_EQ(SplitAddResult(12, {1, 1, 1, 1, 1}), (std::vector<int64_t>{8, 9, 10, 11, 12}));
  EXPECT_EQ(SplitAddResult(0, {5, -7, 2}), (std::vector<int64_t>{5, -2, 0}));
  EXPECT_EQ(SplitAddResult(3, {3}), (std::vector<int64_t>{3}));
  // Wrapping as the store's sums wrap.
  EXPECT_EQ(SplitAddResult(INT64_MIN, {1, 1}), (std::vector<int64_t>{INT64_MAX, INT64_MIN}));
}

TEST(LinkCodecTest, FramesRoundTripSplitAnywhere) {
  std::string wire;
  PutFrames(wire, FrameKind::kOpenShared, 7, "");
  PutFrames(wire, FrameKind::kData, 7, "abc");
  PutFrames(wire, FrameKind::kClose, 0xFFFFFFFF, "");
  EXPECT_EQ(wire.substr(0, 9), Op1(2) + U32(7) + U32(0));
  EXPECT_EQ(wire.substr(9, 12), Op1(0) + U32(7) + U32(3) + "abc");
  FrameDecoder d;
  std::vector<Frame> got;
  for (char ch : wire) {  // one byte at a time
    d.Append(&ch, 1);
    Frame f;
    while (d.Next(&f) == FrameDecoder::Result::kFrame) got.push_back(f);
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind, FrameKind::kOpenShared);
  EXPECT_EQ(got[1].payload, "abc");
  EXPECT_EQ(got[2].stream, 0xFFFFFFFFu);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(LinkCodecTest, ALargePayloadIsCutIntoFrames) {
  std::string big(kMaxFramePayload * 2 + 5, 'x');
  std::string wire;
  PutFrames(wire, FrameKind::kData, 1, big);
  FrameDecoder d;
  d.Append(wire.data(), wire.size());
  std::string joined;
  Frame f;
  int frames = 0;
  while (d.Next(&f) == FrameDecoder::Result::kFrame) {
    joined += f.payload;
    ++frames;
  }
  EXPECT_EQ(frames, 3);
  EXPECT_EQ(joined, big);
}

TEST(LinkCodecTest, StreamIdsWrapPastZeroAndTheIdsStillOpen) {
  // Ids once went on from 2^32 - 1 to 0 and then to the first ids, which a
  // node's long-lived clients hold: the store took the new stream's open for
  // theirs.
  std::set<uint32_t> open = {0xFFFFFFFFu, 1, 2};
  auto in_use = [&](uint32_t id) { return open.contains(id); };
  uint32_t next = 0xFFFFFFFEu;
  EXPECT_EQ(NextStreamId(next, in_use), 0xFFFFFFFEu);
  EXPECT_EQ(NextStreamId(next, in_use), 3u);
  EXPECT_EQ(NextStreamId(next, in_use), 4u);
  EXPECT_EQ(next, 5u);
}

TEST(LinkCodecTest, HostileHeadersAreErrorsBeforeTheirBytes) {
  for (const std::string& header :
       {Op1(0) + U32(1) + U32(0xFFFFFFFF), Op1(9) + U32(1) + U32(0), Op1(1) + U32(1) + U32(4)}) {
    FrameDecoder d;
    d.Append(header.data(), header.size());
    Frame f;
    EXPECT_EQ(d.Next(&f), FrameDecoder::Result::kError);
    EXPECT_FALSE(d.error().empty());
  }
}

TEST(LinkCodecTest, EncodeRequestIsReadBackByTheParser) {
  std::vector<std::pair<Generation, Request>> cases;
  auto add = [&](Generation g, Op op, std::vector<std::string> args, int64_t number = 0,
                 uint32_t word = 0) {
    Request r;
    r.op = op;
    r.args = std::move(args);
    r.number = number;
    r.word = word;
    cases.emplace_back(g, std::move(r));
  };
  add(Generation::kV2, Op::kValidate, {}, 0, kValidationMagic);
  add(Generation::kV2, Op::kSet, {"k", std::string("\0v", 2)});
  add(Generation::kV2, Op::kCompareSet, {"k", "", "d"});
  add(Generation::kV2, Op::kAdd, {"k"}, -3);
  add(Generation::kV2, Op::kWait, {"a", "b", "a"});
  add(Generation::kV2, Op::kMultiSet, {"a", "1", "b", "2"});
  add(Generation::kV2, Op::kListKeys, {});
  add(Generation::kV2, Op::kBarrier, {"b"}, 8);
  add(Generation::kV2, Op::kPing, {}, 0, 1234);
  add(Generation::kV2, Op::kQueuePush, {"q", "x"});
  add(Generation::kV2, Op::kCancelWait, {});
  add(Generation::kV1, Op::kWatchKey, {"w"});
  add(Generation::kV1, Op::kGetNumKeys, {});
  add(Generation::kV1, Op::kMultiGet, {"a"});
  for (Generation g : {Generation::kV1, Generation::kV2}) {
    std::string wire = g == Generation::kV2 ? V2("") : "";
    std::vector<Request> want;
    for (const auto& [cg, r] : cases) {
      if (cg != g || (g == Generation::kV2 && r.op == Op::kValidate)) continue;
      ASSERT_TRUE(EncodeRequest(g, r, wire)) << OpName(r.op);
      want.push_back(r);
    }
    RequestParser p;
    ASSERT_TRUE(p.Append(wire.data(), wire.size()));
    Request r;
    if (g == Generation::kV2) {
      ASSERT_EQ(p.Next(&r), RequestParser::Result::kRequest);  // VALIDATE
    }
    for (const Request& w : want) {
      ASSERT_EQ(p.Next(&r), RequestParser::Result::kRequest) << p.error();
      EXPECT_EQ(r.op, w.op);
      EXPECT_EQ(r.args, w.args) << OpName(w.op);
      EXPECT_EQ(r.number, w.number);
      EXPECT_EQ(r.word, w.word);
    }
    EXPECT_EQ(p.Next(&r), RequestParser::Result::kNeedMore);
  }
  std::string none;
  Request watch;
  watch.op = Op::kWatchKey;
  watch.args = {"w"};
  EXPECT_FALSE(EncodeRequest(Generation::kV2, watch, none));
  Request barrier;
  barrier.op = Op::kBarrier;
  barrier.args = {"b"};
  EXPECT_FALSE(EncodeRequest(Generation::kV1, barrier, none));
  EXPECT_TRUE(none.empty());
}

// ---- a real store, a relay in front of it -----------------------------------

class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    auto s = StoreServerThread::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    store_->RunOnLoop([](StoreServer& s) { s.RequireJobToken(kRelayToken); });
    Status st = StartRelay(kRelayToken);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    if (relay_) OnRelayLoop([this] { relay_.reset(); });
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }

  Status StartRelay(const std::string& token, size_t max_partial_bytes = kDefaultMaxBufferedBytes) {
    RelayOptions o;
    o.max_partial_bytes = max_partial_bytes;
    o.store_host = "127.0.0.1";
    o.store_port = store_->port();
    o.job_token = token;
    o.connect_timeout = milliseconds(5000);
    auto r = Relay::Start(io_, o);
    if (!r.ok()) return r.status();
    relay_ = std::move(*r);
    work_.emplace(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
    return Status::OK();
  }

  void OnRelayLoop(const std::function<void()>& fn) {
    std::promise<void> done;
    asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  RelayStats Stats() {
    RelayStats s;
    OnRelayLoop([&] { s = relay_->stats(); });
    return s;
  }
  // Holds the relay's loop until the returned promise is set: requests
  // sent meanwhile are all read in one turn, as a node's clients that send
  // at once are.
  std::promise<void> HoldRelay() {
    std::promise<void> release;
    std::promise<void> held;
    asio::post(io_, [f = release.get_future().share(), &held] {
      held.set_value();
      f.wait();
    });
    held.get_future().wait();
    return release;
  }
  // Holds the store's loop until Release (or destruction): what the relay
  // sends meanwhile waits in the link, unanswered, "on its way".
  class StoreHold {
   public:
    explicit StoreHold(StoreServerThread& store) {
      thread_ = std::thread([this, &store, go = release_.get_future().share()] {
        store.RunOnLoop([&](StoreServer&) {
          held_.set_value();
          go.wait();
        });
      });
      held_.get_future().wait();
    }
    ~StoreHold() { Release(); }
    void Release() {
      if (!thread_.joinable()) return;
      release_.set_value();
      thread_.join();
    }

   private:
    std::promise<void> held_, release_;
    std::thread thread_;
  };
  // A v2 client of the relay that sends `pipelined` (its requests, one
  // write, the first an ADD of 1 to "k") while another client's ADD of 1 to
  // "k" is on its way, so that its own ADD waits in the key's batch. The
  // store is released once `read` says the relay has read the requests.
  RawSocket PipelineWhileAnAddIsOnItsWay(const std::string& pipelined,
                                         const std::function<bool(const RelayStats&)>& read) {
    RelayStats before = Stats();
    RawSocket other(relay_->port()), client(relay_->port());
    EXPECT_TRUE(other.Send(V2("")));
    EXPECT_TRUE(client.Send(V2("")));
    EXPECT_TRUE(Eventually([&] { return Stats().clients == before.clients + 2; }));
    StoreHold hold(*store_);
    EXPECT_TRUE(other.Send(Op1(v2::kAdd) + Str("k") + U64(1)));
    EXPECT_TRUE(Eventually([&] { return Stats().upstream_adds == before.upstream_adds + 1; }));
    EXPECT_TRUE(client.Send(pipelined));
    EXPECT_TRUE(Eventually([&] { return read(Stats()); }));
    hold.Release();
    EXPECT_EQ(other.Recv(8).size(), 8u);
    return client;
  }
  size_t StoreConnections() {
    size_t n = 0;
    store_->RunOnLoop([&](StoreServer& s) { n = s.num_connections(); });
    return n;
  }
  bool Linked() {
    bool up = false;
    OnRelayLoop([&] { up = relay_->linked(); });
    return up;
  }
  size_t StoreWaits() {
    size_t n = 0;
    store_->RunOnLoop([&](StoreServer& s) { n = s.num_waits(); });
    return n;
  }
  StoreClient ViaRelay() {
    auto c =
        StoreClient::Connect("127.0.0.1", relay_->port(), milliseconds(5000), milliseconds(10000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }
  StoreClient Direct() {
    auto c =
        StoreClient::Connect("127.0.0.1", store_->port(), milliseconds(5000), milliseconds(10000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }
  // A SET on a store connection of its own, in the store when this returns
  // (SET has no reply; PING's follows it): a request on another connection
  // (the relay's link) must not overtake it.
  void DirectSet(const std::string& key, const std::string& value) {
    StoreClient d = Direct();
    ASSERT_TRUE(d.Set(key, value).ok());
    ASSERT_TRUE(d.Ping().ok());
  }
  // `n` v2 clients of the relay, once it has taken them all.
  std::vector<RawSocket> V2Clients(size_t n) {
    std::vector<RawSocket> clients;
    for (size_t i = 0; i < n; ++i) {
      clients.emplace_back(relay_->port());
      EXPECT_TRUE(clients.back().Send(V2("")));
    }
    EXPECT_TRUE(Eventually([&] {
      size_t k = 0;
      OnRelayLoop([&] { k = relay_->num_clients(); });
      return k == n;
    }));
    return clients;
  }
  template <typename F>
  bool Eventually(F f) {
    for (int i = 0; i < 1000; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<StoreServerThread> store_;
  asio::io_context io_{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
};

TEST_F(RelayTest, EveryOperationThroughOneConnection) {
  StoreClient c = ViaRelay();
  StoreClient d = ViaRelay();
  ASSERT_TRUE(c.Set("a", "1").ok());
  EXPECT_EQ(*d.Get("a"), "1");
  EXPECT_EQ(*c.Add("n", 5), 5);
  EXPECT_EQ(*d.Add("n", -7), -2);
  EXPECT_EQ(*c.CompareSet("c", "", "x"), "x");
  EXPECT_EQ(*c.CompareSet("c", "q", "z"), "x");
  EXPECT_FALSE(*c.Check({"missing"}));
  EXPECT_TRUE(*c.Check({"a", "n"}));
  EXPECT_EQ(*c.NumKeys(), 3);  // the store's auth nonce key is trun's: not shown
  ASSERT_TRUE(c.Append("a", "23").ok());
  // APPEND, MULTI_SET and QUEUE_PUSH have no reply: c's PING, answered once
  // what c sent before is settled, keeps d's next read behind them.
  ASSERT_TRUE(c.Ping().ok());
  EXPECT_EQ(*d.Get("a"), "123");
  ASSERT_TRUE(c.MultiSet({{"m1", "x"}, {"m2", "y"}}).ok());
  ASSERT_TRUE(c.Ping().ok());
  EXPECT_EQ(*d.MultiGet({"m1", "m2", "absent"}), (std::vector<std::string>{"x", "y", ""}));
  EXPECT_TRUE(*c.DeleteKey("m1"));
  EXPECT_FALSE(*c.DeleteKey("m1"));
  EXPECT_TRUE(c.Ping().ok());
  auto keys = c.ListKeys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(std::set<std::string>(keys->begin(), keys->end()),
            (std::set<std::string>{"a", "n", "c", "m2"}));
  ASSERT_TRUE(c.QueuePush("q", "item").ok());
  ASSERT_TRUE(c.Ping().ok());
  EXPECT_EQ(*d.QueueLen("q"), 1);
  EXPECT_EQ(*d.QueuePop("q", false), "item");
  // What went through the relay is in the store, which holds one
  // connection for both clients: the relay's link.
  StoreClient direct = Direct();
  EXPECT_EQ(*direct.Get("n"), "-2");
  EXPECT_EQ(StoreConnections(), 2u);  // the link and `direct`
}

TEST_F(RelayTest, BatchedAddsAreDistinctAndContiguous) {
  std::vector<RawSocket> clients = V2Clients(8);
  {
    auto release = HoldRelay();
    std::string add = Op1(v2::kAdd) + Str("count") + U64(1);
    for (auto& c : clients) ASSERT_TRUE(c.Send(add));
    release.set_value();
  }
  std::set<int64_t> values;
  for (auto& c : clients) {
    std::string got = c.Recv(8);
    ASSERT_EQ(got.size(), 8u);
    int64_t v;
    std::memcpy(&v, got.data(), 8);
    values.insert(v);
  }
  EXPECT_EQ(values, (std::set<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  RelayStats s = Stats();
  EXPECT_EQ(s.local_adds, 8u);
  // All eight came in one turn of the relay's loop (it was held): one ADD
  // of 8 went up.
  EXPECT_EQ(s.upstream_adds, 1u);
  EXPECT_EQ(*Direct().Get("count"), "8");
}

TEST_F(RelayTest, OneUpstreamWaitForEveryLocalWaiter) {
  std::vector<RawSocket> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back(relay_->port());
    ASSERT_TRUE(clients.back().Send(V2(Op1(v2::kWait) + U64(1) + Str("ready"))));
  }
  ASSERT_TRUE(Eventually([&] { return Stats().local_waits == 8; }));
  EXPECT_EQ(Stats().upstream_waits, 1u);
  DirectSet("ready", "1");
  for (auto& c : clients) EXPECT_EQ(c.Recv(1), Op1(kWaitStopWaiting));
}

TEST_F(RelayTest, ConcurrentGetsOfOneKeyShareOneUpstreamGet) {
  DirectSet("value", "broadcast");
  std::vector<RawSocket> clients = V2Clients(8);
  {
    auto release = HoldRelay();
    for (auto& c : clients) ASSERT_TRUE(c.Send(Op1(v2::kGet) + Str("value")));
    release.set_value();
  }
  for (auto& c : clients) EXPECT_EQ(c.Recv(8 + 9), Str("broadcast"));
  RelayStats s = Stats();
  EXPECT_EQ(s.local_gets, 8u);
  EXPECT_EQ(s.upstream_gets, 1u);
}

TEST_F(RelayTest, AGetAfterAWriteIsNotServedAnOlderAnswer) {
  StoreClient c = ViaRelay();
  ASSERT_TRUE(c.Set("k", "old").ok());
  EXPECT_EQ(*c.Get("k"), "old");
  ASSERT_TRUE(c.Set("k", "new").ok());
  EXPECT_EQ(*c.Get("k"), "new");
}

TEST_F(RelayTest, AQueuePushWakesOneLocalWaiter) {
  // A blocking pop is WAIT, then QUEUE_POP: one item must wake one waiter,
  // the first.
  RawSocket a(relay_->port()), b(relay_->port());
  ASSERT_TRUE(a.Send(V2(Op1(v2::kWait) + U64(1) + Str("jobs"))));
  ASSERT_TRUE(Eventually([&] { return Stats().local_waits == 1; }));
  ASSERT_TRUE(b.Send(V2(Op1(v2::kWait) + U64(1) + Str("jobs"))));
  ASSERT_TRUE(Eventually([&] { return Stats().local_waits == 2; }));
  // The relay's WAIT parked in the store before the push, which comes on a
  // connection of its own: a WAIT that found the item would free both.
  ASSERT_TRUE(Eventually([&] { return StoreWaits() == 1; }));
  StoreClient pusher = Direct();
  ASSERT_TRUE(pusher.QueuePush("jobs", "j1").ok());
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));  // the first to wait
  // The item is not popped, yet b waits on: only the next push wakes it,
  // as on the store.
  EXPECT_EQ(b.Recv(1, 300), "");
  ASSERT_TRUE(pusher.QueuePush("jobs", "j2").ok());
  EXPECT_EQ(b.Recv(1), Op1(kWaitStopWaiting));
}

TEST_F(RelayTest, WaitTimeoutCancelsAndTheClientStaysInStep) {
  StoreClient c = ViaRelay();
  Status st = c.Wait({"never"}, milliseconds(100));
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  DirectSet("never", "now");
  ASSERT_TRUE(c.Set("after", "1").ok());
  EXPECT_EQ(*c.Get("after"), "1");
}

TEST_F(RelayTest, BarriersKeepTheirExactSemantics) {
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      StoreClient c = ViaRelay();
      if (c.Barrier("b", 4, milliseconds(20000)).ok()) ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 4);
  // A barrier that times out is cancelled upstream, and its arrival counts.
  StoreClient c = ViaRelay();
  EXPECT_EQ(c.Barrier("b2", 2, milliseconds(100)).code(), StatusCode::kTimeout);
  EXPECT_TRUE(c.Barrier("b2", 2, milliseconds(10000)).ok());
}

TEST_F(RelayTest, V1ClientsAndWatchKey) {
  RawSocket watch(relay_->port());
  ASSERT_TRUE(watch.Send(Op1(v1::kWatchKey) + Str("/w")));
  EXPECT_EQ(watch.Recv(1), Op1(kWatchCallbackRegistered));
  RawSocket main(relay_->port());
  ASSERT_TRUE(main.Send(Op1(v1::kAdd)));  // the opcode alone first, as torch 1.13
  ASSERT_TRUE(main.Send(Str("init/") + U64(1)));
  EXPECT_EQ(main.Recv(8), U64(1));
  ASSERT_TRUE(main.Send(Op1(v1::kSet) + Str("/w") + Str("1")));
  EXPECT_EQ(watch.Recv(1 + 10 + 8 + 9), Op1(kWatchKeyCreated) + Str("/w") + Str("") + Str("1"));
  ASSERT_TRUE(main.Send(Op1(v1::kWait) + U64(1) + Str("/w") + Op1(v1::kGet) + Str("/w")));
  EXPECT_EQ(main.Recv(1 + 9), Op1(kWaitStopWaiting) + Str("1"));
  ASSERT_TRUE(main.Send(Op1(v1::kGetNumKeys)));
  EXPECT_EQ(main.Recv(8), U64(2));  // init/, /w
}

TEST_F(RelayTest, TrunKeysAndBadBytesCloseOnlyThatClient) {
  RawSocket bad(relay_->port());
  ASSERT_TRUE(bad.Send(V2(Op1(v2::kSet) + Str("/trun/rdzv/x") + Str("1"))));
  EXPECT_TRUE(bad.Closed());
  RawSocket garbage(relay_->port());
  ASSERT_TRUE(garbage.Send(std::string("\xff\xff\xff", 3)));
  EXPECT_TRUE(garbage.Closed());
  StoreClient good = ViaRelay();
  ASSERT_TRUE(good.Set("fine", "1").ok());
  EXPECT_EQ(*good.Get("fine"), "1");
  EXPECT_TRUE(Linked());
}

// The relay's own port is a way in: a client that announces more than the
// limits, one that stops halfway and one that sends a byte at a time harm
// no other client and not the link.
TEST_F(RelayTest, OversizedTruncatedAndSlowClientsHarmNoOne) {
  RawSocket huge(relay_->port());
  ASSERT_TRUE(huge.Send(V2(Op1(v2::kSet) + Str("k") + U64(uint64_t{1} << 40))));
  EXPECT_TRUE(huge.Closed());
  {
    RawSocket cut(relay_->port());
    const std::string set = V2(Op1(v2::kSet) + Str("cut") + Str("value"));
    ASSERT_TRUE(cut.Send(set.substr(0, set.size() - 3)));
  }
  RawSocket slow(relay_->port());
  for (char byte : V2(Op1(v2::kPing) + U32(7))) ASSERT_TRUE(slow.Send(std::string(1, byte)));
  EXPECT_EQ(slow.Recv(4), U32(7));
  StoreClient good = ViaRelay();
  ASSERT_TRUE(good.Set("fine", "1").ok());
  EXPECT_EQ(*good.Get("fine"), "1");
  EXPECT_TRUE(Linked());
}

// A link carries kMaxLinkStreams streams at most, and the store drops a
// link that opens more, with every client of the node: a local client
// cannot make the relay open more. A WAIT on more keys than the relay may
// share waits on (a stream each) goes up on its client's own stream, and
// the keys it left waited on are no reason to refuse another's WAIT; the
// clients past the relay's cap are closed at accept.
TEST_F(RelayTest, ClientsAndWaitsThatWouldOverflowTheLinkAreRefusedNotTheLink) {
  StoreClient good = ViaRelay();
  ASSERT_TRUE(good.Set("fine", "1").ok());
  {
    RawSocket waiter(relay_->port());
    std::string keys;
    for (size_t i = 0; i <= kMaxLinkStreams; ++i) keys += Str("k" + std::to_string(i));
    ASSERT_TRUE(waiter.Send(V2(Op1(v2::kWait) + U64(kMaxLinkStreams + 1) + keys)));
    RawSocket half(relay_->port());  // most of the shared waits, then gone
    keys.clear();
    for (size_t i = 0; i < kMaxLinkStreams / 2 - 2; ++i) keys += Str("h" + std::to_string(i));
    ASSERT_TRUE(half.Send(V2(Op1(v2::kWait) + U64(kMaxLinkStreams / 2 - 2) + keys)));
    ASSERT_TRUE(half.Send(V2(Op1(v2::kPing) + U32(1))));
    EXPECT_FALSE(half.Closed(200));
    EXPECT_FALSE(waiter.Closed(200));
  }
  RawSocket rank(relay_->port());
  ASSERT_TRUE(rank.Send(V2(Op1(v2::kWait) + U64(2) + Str("w1") + Str("w2"))));
  ASSERT_TRUE(good.Set("w1", "1").ok());
  ASSERT_TRUE(good.Set("w2", "1").ok());
  EXPECT_EQ(rank.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_TRUE(Linked());
  // Each client asks what only the store answers (a stream each), then a
  // PING that comes back once the store has its SET.
  std::vector<RawSocket> many;
  for (size_t i = 0; i <= kMaxLinkStreams; ++i) many.emplace_back(relay_->port());
  for (auto& c : many)
    (void)c.Send(V2(Op1(v2::kSet) + Str("m") + Str("1") + Op1(v2::kPing) + U32(7)));
  size_t answered = 0;
  for (auto& c : many) answered += c.Recv(4) == U32(7);
  EXPECT_EQ(answered, kMaxLinkStreams / 2 - 2);  // `good` and `rank` hold two of the cap
  EXPECT_TRUE(Linked());
  EXPECT_EQ(*good.Get("fine"), "1");
}

// What clients' unfinished requests hold is bounded as at the store: over
// the budget, the client whose request waited longest for its next byte is
// closed, and the others are not.
TEST(RelayPressureTest, UnfinishedRequestsAreHeldToTheBudget) {
  ServerOptions so;
  so.host = "127.0.0.1";
  auto store = StoreServerThread::Start(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  asio::io_context io;
  RelayOptions o;
  o.store_host = "127.0.0.1";
  o.store_port = (*store)->port();
  o.connect_timeout = milliseconds(5000);
  o.max_partial_bytes = 1 << 20;
  auto relay = Relay::Start(io, o);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  std::thread loop([&] { io.run_for(std::chrono::seconds(30)); });
  const std::string big(700 * 1024, 'x');
  const std::string set = V2(Op1(v2::kSet) + Str("k") + Str(big));
  RawSocket first((*relay)->port()), second((*relay)->port());
  ASSERT_TRUE(first.Send(set.substr(0, set.size() - 1)));
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(second.Send(set.substr(0, set.size() - 1)));
  EXPECT_TRUE(first.Closed());
  ASSERT_TRUE(second.Send(set.substr(set.size() - 1) + Op1(v2::kPing) + U32(7)));
  EXPECT_EQ(second.Recv(4), U32(7));
  asio::post(io, [&] { relay->reset(); });
  io.stop();
  loop.join();
}

// At the cap, the oldest client that has sent nothing yet gives way to a
// newcomer: idle connections cannot keep a node's ranks out.
TEST_F(RelayTest, AtTheCapTheOldestSilentClientGivesWay) {
  StoreClient good = ViaRelay();
  ASSERT_TRUE(good.Set("fine", "1").ok());
  std::vector<RawSocket> idle;
  for (size_t i = 0; i < kMaxLinkStreams / 2 - 1; ++i) idle.emplace_back(relay_->port());
  RawSocket spoke(relay_->port());  // the newcomer: the first idle one goes
  ASSERT_TRUE(spoke.Send(V2(Op1(v2::kPing) + U32(7))));
  EXPECT_EQ(spoke.Recv(4), U32(7));
  EXPECT_TRUE(idle.front().Closed());
  EXPECT_EQ(*good.Get("fine"), "1");
  EXPECT_TRUE(Linked());
}

TEST_F(RelayTest, ARelayWithoutTheTokenIsRefused) {
  RelayOptions o;
  o.store_host = "127.0.0.1";
  o.store_port = store_->port();
  o.job_token = "not-the-job-token-0123456789";
  o.connect_timeout = milliseconds(5000);
  asio::io_context io;
  auto wrong = Relay::Start(io, o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied);
  // A link asked for without the proof closes the connection.
  RawSocket raw(store_->port());
  ASSERT_TRUE(raw.Send(V2(Op1(v2::kCompareSet) + Str(kLinkKey) + Str("") + Str(kLinkVersion))));
  EXPECT_TRUE(raw.Closed());
}

// ---- one client's requests in order (issue 31) ------------------------------

const std::string kAddK = Op1(v2::kAdd) + Str("k") + U64(1);

// The bug: the second ADD waited in the key's batch for the first's answer,
// and the GET went up at once and read the count without it.
TEST_F(RelayTest, APipelinedAddAddGetTakeEffectInOrder) {
  std::vector<RawSocket> clients = V2Clients(1);
  RawSocket& a = clients[0];
  {
    StoreHold hold(*store_);
    ASSERT_TRUE(a.Send(kAddK));
    ASSERT_TRUE(Eventually([&] { return Stats().upstream_adds == 1; }));
    ASSERT_TRUE(a.Send(kAddK + Op1(v2::kGet) + Str("k")));
    ASSERT_TRUE(Eventually([&] { return Stats().local_gets == 1; }));
  }
  EXPECT_EQ(a.Recv(8 + 8 + 9), U64(1) + U64(2) + Str("2"));
}

TEST_F(RelayTest, AnAddHeldInItsBatchGoesUpBeforeTheClientsNextRequest) {
  // ADD, DELETE, CHECK: the DELETE must not remove the key before the ADD.
  RawSocket a = PipelineWhileAnAddIsOnItsWay(
      kAddK + Op1(v2::kDeleteKey) + Str("k") + Op1(v2::kCheck) + U64(1) + Str("k"),
      [](const RelayStats& s) { return s.forwarded >= 2; });
  EXPECT_EQ(a.Recv(8 + 8 + 1), U64(2) + U64(1) + Op1(kCheckNotReady));
}

TEST_F(RelayTest, AnAddHeldInItsBatchIsAppliedBeforeTheClientsSet) {
  // ADD, SET, GET: the ADD is applied to the count, not to the SET's text
  // (which would close the client).
  RawSocket a = PipelineWhileAnAddIsOnItsWay(
      kAddK + Op1(v2::kSet) + Str("k") + Str("text") + Op1(v2::kGet) + Str("k"),
      [](const RelayStats& s) { return s.local_gets == 1; });
  EXPECT_EQ(a.Recv(8 + 12), U64(2) + Str("text"));
}

TEST_F(RelayTest, AWaitAfterAHeldAddIsAnsweredAfterIt) {
  // The key waited on exists: the store answers the WAIT at once, after
  // the ADD's answer.
  DirectSet("ready", "1");
  RawSocket a =
      PipelineWhileAnAddIsOnItsWay(kAddK + Op1(v2::kWait) + U64(1) + Str("ready"),
                                   [](const RelayStats& s) { return s.local_waits == 1; });
  EXPECT_EQ(a.Recv(8 + 1), U64(2) + Op1(kWaitStopWaiting));
  // A WAIT of the ADD's own key: the ADD made it.
  RawSocket b =
      PipelineWhileAnAddIsOnItsWay(kAddK + Op1(v2::kWait) + U64(1) + Str("k"),
                                   [](const RelayStats& s) { return s.local_waits == 2; });
  EXPECT_EQ(b.Recv(8 + 1), U64(4) + Op1(kWaitStopWaiting));
}

TEST_F(RelayTest, TheRelaysOwnAnswersWaitForTheClientsEarlierOnes) {
  // PING, CANCEL_WAIT and a WAIT of no keys are answered by the relay
  // itself, but not before the held ADD's answer.
  RawSocket a = PipelineWhileAnAddIsOnItsWay(
      kAddK + Op1(v2::kPing) + U32(7) + Op1(v2::kCancelWait) + Op1(v2::kWait) + U64(0),
      [](const RelayStats& s) { return s.local_waits == 1; });
  EXPECT_EQ(a.Recv(8 + 4 + 1 + 1), U64(2) + U32(7) + Op1(kWaitCanceled) + Op1(kWaitStopWaiting));
}

TEST_F(RelayTest, AGetDoesNotShareAnAnswerThatPrecedesTheClientsOwnAdd) {
  // b's GET is on its way; a's ADD waits for the end of the loop's turn,
  // and a's GET must read the count with it, not share b's answer.
  DirectSet("k", "10");
  std::vector<RawSocket> clients = V2Clients(2);
  RawSocket &a = clients[0], &b = clients[1];
  {
    StoreHold hold(*store_);
    ASSERT_TRUE(b.Send(Op1(v2::kGet) + Str("k")));
    ASSERT_TRUE(Eventually([&] { return Stats().upstream_gets == 1; }));
    ASSERT_TRUE(a.Send(kAddK + Op1(v2::kGet) + Str("k")));
    ASSERT_TRUE(Eventually([&] { return Stats().local_gets == 2; }));
  }
  EXPECT_EQ(b.Recv(8 + 2), Str("10"));
  EXPECT_EQ(a.Recv(8 + 8 + 2), U64(11) + Str("11"));
}

TEST_F(RelayTest, AWaitAfterTheClientsOwnSetDoesNotRideOnAnOlderAnsweredWait) {
  // b waits on "k" upstream. Then, while the relay is held, a sends SET x
  // and WAIT k, and another client sets "k" and deletes it again: the
  // upstream WAIT's answer is on its way to the relay, but when a's SET
  // takes effect "k" is gone, so a's WAIT must go on waiting.
  std::vector<RawSocket> clients = V2Clients(2);
  RawSocket &a = clients[0], &b = clients[1];
  ASSERT_TRUE(b.Send(Op1(v2::kWait) + U64(1) + Str("k")));
  ASSERT_TRUE(Eventually([&] { return Stats().upstream_waits == 1; }));
  StoreClient sync = ViaRelay();  // the store has taken b's WAIT once this is answered
  EXPECT_FALSE(*sync.Check({"k"}));
  {
    auto release = HoldRelay();
    ASSERT_TRUE(a.Send(Op1(v2::kSet) + Str("x") + Str("1") + Op1(v2::kWait) + U64(1) + Str("k")));
    StoreClient d = Direct();
    ASSERT_TRUE(d.Set("k", "1").ok());
    EXPECT_TRUE(*d.DeleteKey("k"));
    release.set_value();
  }
  EXPECT_EQ(b.Recv(1), Op1(kWaitStopWaiting));
  EXPECT_EQ(a.Recv(1, 300), "");
  DirectSet("k", "2");
  EXPECT_EQ(a.Recv(1), Op1(kWaitStopWaiting));
}

TEST_F(RelayTest, ACancelWaitAfterABarrierAndOtherAnswersStillCancelsIt) {
  std::vector<RawSocket> clients = V2Clients(1);
  RawSocket& a = clients[0];
  ASSERT_TRUE(a.Send(Op1(v2::kBarrier) + Str("b") + U64(2)));
  ASSERT_TRUE(a.Send(Op1(v2::kCheck) + U64(1) + Str("y")));
  EXPECT_EQ(a.Recv(1), Op1(kCheckNotReady));
  ASSERT_TRUE(a.Send(Op1(v2::kCancelWait)));
  EXPECT_EQ(a.Recv(1), Op1(kWaitCanceled));
  // a's arrival counts; its wait was cancelled, so the barrier's end
  // sends it nothing.
  EXPECT_TRUE(ViaRelay().Barrier("b", 2, milliseconds(10000)).ok());
  EXPECT_EQ(a.Recv(1, 300), "");
}

TEST_F(RelayTest, AnAddHeldBehindARefusedOneIsStillSent) {
  // b's ADD of a key that is no integer is refused; a's, held behind it in
  // the batch, reaches the store after it and is refused too: a is closed,
  // not left waiting for an answer.
  DirectSet("k", "text");
  std::vector<RawSocket> clients = V2Clients(2);
  RawSocket &a = clients[0], &b = clients[1];
  {
    StoreHold hold(*store_);
    ASSERT_TRUE(b.Send(kAddK));
    ASSERT_TRUE(Eventually([&] { return Stats().upstream_adds == 1; }));
    ASSERT_TRUE(a.Send(kAddK));
    ASSERT_TRUE(Eventually([&] { return Stats().local_adds == 2; }));
  }
  EXPECT_TRUE(b.Closed());
  EXPECT_TRUE(a.Closed());
  EXPECT_TRUE(Linked());
}

// One client that pipelines random requests on a few keys, its bytes cut
// anywhere: through the relay it gets exactly the bytes a direct
// connection gets.
TEST_F(RelayTest, PipelinedRandomRequestsGetTheStoresOwnAnswers) {
  std::mt19937 rng(31);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int round = 0; round < 40; ++round) {
    std::string p = "r" + std::to_string(round) + "/";
    const std::vector<std::string> counts = {p + "a", p + "b"}, texts = {p + "s", p + "t"};
    auto any = [&] { return pick(2) ? counts[pick(2)] : texts[pick(2)]; };
    std::string wire;
    for (int i = 0; i < 30; ++i) {
      switch (pick(12)) {
        case 0:
        case 1:
          wire += Op1(v2::kAdd) + Str(counts[pick(2)]) + U64(static_cast<uint64_t>(pick(7) - 3));
          break;
        case 2:
          wire += Op1(v2::kGet) + Str(any());
          break;
        case 3:
          wire += Op1(v2::kSet) + Str(texts[pick(2)]) + Str(std::to_string(i));
          break;
        case 4:
          wire += Op1(v2::kDeleteKey) + Str(any());
          break;
        case 5:
          wire += Op1(v2::kCheck) + U64(1) + Str(any());
          break;
        case 6:
          wire += Op1(v2::kWait) + U64(2) + Str(any()) + Str(any());
          break;
        case 7:
          wire += Op1(v2::kCancelWait);
          break;
        case 8:
          wire += Op1(v2::kPing) + U32(static_cast<uint32_t>(i));
          break;
        case 9:
          wire += Op1(v2::kAppend) + Str(texts[pick(2)]) + Str("+");
          break;
        case 10:
          wire += Op1(v2::kCompareSet) + Str(texts[pick(2)]) + Str("") + Str("new");
          break;
        default:
          wire += Op1(v2::kMultiGet) + U64(2) + Str(any()) + Str(any());
          break;
      }
    }
    const std::string end = U32(0xC0FFEE00 + static_cast<uint32_t>(round));
    wire += Op1(v2::kPing) + end;
    auto run = [&](int port) {
      RawSocket s(port);
      std::string bytes = V2(wire);
      for (size_t at = 0; at < bytes.size();) {
        size_t n = std::min(bytes.size() - at, static_cast<size_t>(1 + pick(80)));
        EXPECT_TRUE(s.Send(bytes.substr(at, n)));
        at += n;
        if (pick(4) == 0) std::this_thread::sleep_for(std::chrono::microseconds(pick(2000)));
      }
      std::string got;
      while (got.size() < end.size() || got.compare(got.size() - end.size(), end.size(), end)) {
        std::string more = s.Recv(1);
        if (more.empty()) break;
        got += more;
      }
      return got;
    };
    std::string direct = run(store_->port());
    // The relay's run starts from the keys as the direct run began.
    for (const auto& k : counts) (void)Direct().DeleteKey(k);
    for (const auto& k : texts) (void)Direct().DeleteKey(k);
    EXPECT_EQ(run(relay_->port()), direct) << "round " << round;
  }
}

// ---- hostile links (the store's side) --------------------------------------

// A connection that proved the token and became a link, as raw bytes.
RawSocket OpenLink(int store_port) {
  auto c = StoreClient::Connect("127.0.0.1", store_port, milliseconds(5000), milliseconds(5000));
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(ShowJobToken(*c, kRelayToken, "the store").ok());
  EXPECT_EQ(*c->CompareSet(kLinkKey, "", kLinkVersion), kLinkVersion);
  return RawSocket::Adopt(c->ReleaseSocket());
}

std::string LinkFrame(FrameKind kind, uint32_t stream, const std::string& payload) {
  std::string o;
  PutFrames(o, kind, stream, payload);
  return o;
}

TEST_F(RelayTest, AStreamThatBreaksTheProtocolClosesAloneAndTheLinkGoesOn) {
  RawSocket link = OpenLink(store_->port());
  ASSERT_TRUE(link.Send(LinkFrame(FrameKind::kData, 5, std::string("\xff", 1))));
  EXPECT_EQ(link.Recv(9), LinkFrame(FrameKind::kClose, 5, ""));
  ASSERT_TRUE(
      link.Send(LinkFrame(FrameKind::kData, 6, V2(Op1(v2::kSet) + Str("/trun/x") + Str("1")))));
  EXPECT_EQ(link.Recv(9), LinkFrame(FrameKind::kClose, 6, ""));
  ASSERT_TRUE(link.Send(LinkFrame(FrameKind::kData, 7, V2(Op1(v2::kPing) + U32(42)))));
  EXPECT_EQ(link.Recv(9 + 4), LinkFrame(FrameKind::kData, 7, U32(42)));
}

TEST_F(RelayTest, HostileFramesDropTheLinkAndNothingElse) {
  StoreClient bystander = Direct();
  ASSERT_TRUE(bystander.Set("alive", "1").ok());
  const std::vector<std::string> attacks = {
      Op1(0) + U32(1) + U32(0xFFFFFFFF),               // a 4 GiB frame announced
      Op1(200) + U32(1) + U32(0),                      // an unknown kind
      LinkFrame(FrameKind::kWokeOne, 1, ""),           // the store's own kind
      Op1(2) + U32(1) + U32(16) + "xxxxxxxxxxxxxxxx",  // OPEN_SHARED with a payload
  };
  for (const auto& attack : attacks) {
    RawSocket link = OpenLink(store_->port());
    ASSERT_TRUE(link.Send(attack));
    EXPECT_TRUE(link.Closed());
  }
  // Too many streams: the link is closed at the bound, not grown.
  RawSocket many = OpenLink(store_->port());
  std::string opens;
  for (uint32_t i = 1; i <= kMaxLinkStreams + 1; ++i)
    opens += LinkFrame(FrameKind::kOpenShared, i, "");
  ASSERT_TRUE(many.Send(opens));
  EXPECT_TRUE(many.Closed());
  EXPECT_EQ(*bystander.Get("alive"), "1");
}

}  // namespace
}  // namespace trun::store
