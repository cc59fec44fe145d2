#include "store/parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "store/golden_bytes.h"

namespace trun::store {
namespace {

using golden::Op1;
using golden::Str;
using golden::U32;
using golden::U64;

const std::string kValidate = Op1(v2::kValidate) + U32(kValidationMagic);

std::vector<Request> ParseAll(const std::string& bytes, size_t chunk, RequestParser& p,
                              bool* error = nullptr) {
  std::vector<Request> out;
  for (size_t i = 0; i < bytes.size(); i += chunk) {
    EXPECT_TRUE(p.Append(bytes.data() + i, std::min(chunk, bytes.size() - i)));
    Request r;
    while (true) {
      auto res = p.Next(&r);
      if (res == RequestParser::Result::kRequest) {
        out.push_back(r);
        continue;
      }
      if (res == RequestParser::Result::kError && error) *error = true;
      break;
    }
  }
  return out;
}

TEST(ParserTest, V1MessagesAtEverySplit) {
  // torch 1.13: SET, ADD, WAIT, GET, COMPARE_SET, GETNUMKEYS, DELETE_KEY, CHECK, WATCH_KEY.
  std::string bytes = Op1(v1::kSet) + Str("/a") + Str("hello") + Op1(v1::kAdd) + Str("init/") +
                      U64(1) + Op1(v1::kWait) + U64(2) + Str("/a") + Str("/b") + Op1(v1::kGet) +
                      Str("/a") + Op1(v1::kCompareSet) + Str("/c") + Str("") + Str("x") +
                      Op1(v1::kGetNumKeys) + Op1(v1::kDeleteKey) + Str("/a") + Op1(v1::kCheck) +
                      U64(1) + Str("/a") + Op1(v1::kWatchKey) + Str("/w");
  for (size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
    RequestParser p;
    auto reqs = ParseAll(bytes, chunk, p);
    ASSERT_EQ(reqs.size(), 9u) << "chunk " << chunk;
    EXPECT_EQ(p.generation(), Generation::kV1);
    EXPECT_EQ(reqs[0].op, Op::kSet);
    EXPECT_EQ(reqs[0].args, (std::vector<std::string>{"/a", "hello"}));
    EXPECT_EQ(reqs[1].op, Op::kAdd);
    EXPECT_EQ(reqs[1].number, 1);
    EXPECT_EQ(reqs[2].op, Op::kWait);
    EXPECT_EQ(reqs[2].args, (std::vector<std::string>{"/a", "/b"}));
    EXPECT_EQ(reqs[3].op, Op::kGet);
    EXPECT_EQ(reqs[4].op, Op::kCompareSet);
    EXPECT_EQ(reqs[4].args, (std::vector<std::string>{"/c", "", "x"}));
    EXPECT_EQ(reqs[5].op, Op::kGetNumKeys);
    EXPECT_EQ(reqs[6].op, Op::kDeleteKey);
    EXPECT_EQ(reqs[7].op, Op::kCheck);
    EXPECT_EQ(reqs[8].op, Op::kWatchKey);
  }
}

TEST(ParserTest, V2MessagesAtEverySplit) {
  std::string bytes =
      kValidate + Op1(v2::kPing) + U32(77) + Op1(v2::kSet) + Str("k") + Str("v") +
      Op1(v2::kMultiSet) + U64(2) + Str("a") + Str("1") + Str("b") + Str("2") + Op1(v2::kMultiGet) +
      U64(2) + Str("a") + Str("b") + Op1(v2::kAppend) + Str("k") + Str("w") + Op1(v2::kCancelWait) +
      Op1(v2::kQueuePush) + Str("q") + Str("item") + Op1(v2::kQueuePop) + Str("q") +
      Op1(v2::kQueueLen) + Str("q") + Op1(v2::kDeleteKey) + Str("k") + Op1(v2::kGetNumKeys) +
      Op1(v2::kCompareSet) + Str("c") + Str("old") + Str("new") + Op1(v2::kGet) + Str("c") +
      Op1(v2::kAdd) + Str("n") + U64(uint64_t(-3)) + Op1(v2::kCheck) + U64(1) + Str("n") +
      Op1(v2::kWait) + U64(0) + Op1(v2::kValidate) + U32(kValidationMagic);
  for (size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
    RequestParser p;
    auto reqs = ParseAll(bytes, chunk, p);
    ASSERT_EQ(reqs.size(), 18u) << "chunk " << chunk;
    EXPECT_EQ(p.generation(), Generation::kV2);
    EXPECT_EQ(reqs[0].op, Op::kValidate);
    EXPECT_EQ(reqs[0].word, kValidationMagic);
    EXPECT_EQ(reqs[1].op, Op::kPing);
    EXPECT_EQ(reqs[1].word, 77u);
    EXPECT_EQ(reqs[3].op, Op::kMultiSet);
    EXPECT_EQ(reqs[3].args, (std::vector<std::string>{"a", "1", "b", "2"}));
    EXPECT_EQ(reqs[4].op, Op::kMultiGet);
    EXPECT_EQ(reqs[5].op, Op::kAppend);
    EXPECT_EQ(reqs[6].op, Op::kCancelWait);
    EXPECT_EQ(reqs[7].op, Op::kQueuePush);
    EXPECT_EQ(reqs[8].op, Op::kQueuePop);
    EXPECT_EQ(reqs[9].op, Op::kQueueLen);
    EXPECT_EQ(reqs[10].op, Op::kDeleteKey);
    EXPECT_EQ(reqs[11].op, Op::kGetNumKeys);
    EXPECT_EQ(reqs[12].op, Op::kCompareSet);
    EXPECT_EQ(reqs[12].args, (std::vector<std::string>{"c", "old", "new"}));
    EXPECT_EQ(reqs[13].op, Op::kGet);
    EXPECT_EQ(reqs[14].op, Op::kAdd);
    EXPECT_EQ(reqs[14].number, -3);
    EXPECT_EQ(reqs[15].op, Op::kCheck);
    EXPECT_EQ(reqs[16].op, Op::kWait);
    EXPECT_TRUE(reqs[16].args.empty());
    // Byte 0 later on a v2 connection is VALIDATE again, never SET.
    EXPECT_EQ(reqs[17].op, Op::kValidate);
  }
}

TEST(ParserTest, V1TorchTwoZeroOpcodesAtEverySplit) {
  // torch 2.0/2.1 added APPEND, MULTI_GET, MULTI_SET, CANCEL_WAIT to v1.
  std::string bytes = Op1(v1::kAppend) + Str("/k") + Str("more") + Op1(v1::kMultiGet) + U64(2) +
                      Str("/a") + Str("/b") + Op1(v1::kMultiSet) + U64(1) + Str("/a") + Str("1") +
                      Op1(v1::kCancelWait);
  for (size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
    RequestParser p;
    auto reqs = ParseAll(bytes, chunk, p);
    ASSERT_EQ(reqs.size(), 4u) << "chunk " << chunk;
    EXPECT_EQ(p.generation(), Generation::kV1);
    EXPECT_EQ(reqs[0].op, Op::kAppend);
    EXPECT_EQ(reqs[0].args, (std::vector<std::string>{"/k", "more"}));
    EXPECT_EQ(reqs[1].op, Op::kMultiGet);
    EXPECT_EQ(reqs[1].args, (std::vector<std::string>{"/a", "/b"}));
    EXPECT_EQ(reqs[2].op, Op::kMultiSet);
    EXPECT_EQ(reqs[2].args, (std::vector<std::string>{"/a", "1"}));
    EXPECT_EQ(reqs[3].op, Op::kCancelWait);
  }
}

// Bytes written out by hand, not by the helpers above, so that a mistake in
// both the helpers and the parser cannot cancel out.
TEST(ParserTest, LiteralGoldenBytes) {
  // torch 1.13 `store.set("a", "hi")`: opcode 0, u64 2, "/a", u64 2, "hi".
  const unsigned char v1_set[] = {0x00, 0x02, 0, 0, 0, 0, 0, 0, 0,   '/', 'a',
                                  0x02, 0,    0, 0, 0, 0, 0, 0, 'h', 'i'};
  RequestParser p1;
  auto r1 = ParseAll(std::string(reinterpret_cast<const char*>(v1_set), sizeof v1_set), 1, p1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(p1.generation(), Generation::kV1);
  EXPECT_EQ(r1[0].op, Op::kSet);
  EXPECT_EQ(r1[0].args, (std::vector<std::string>{"/a", "hi"}));

  // A torch 2.x client's greeting: VALIDATE 0x3C85F7CE, then PING 7, then
  // ADD("/n", 1) with v2's opcode 4.
  const unsigned char v2_hello[] = {0x00, 0xCE, 0xF7, 0x85, 0x3C, 0x0D, 0x07, 0, 0, 0,
                                    0x04, 0x02, 0,    0,    0,    0,    0,    0, 0, '/',
                                    'n',  0x01, 0,    0,    0,    0,    0,    0, 0};
  RequestParser p2;
  auto r2 = ParseAll(std::string(reinterpret_cast<const char*>(v2_hello), sizeof v2_hello), 3, p2);
  ASSERT_EQ(r2.size(), 3u);
  EXPECT_EQ(p2.generation(), Generation::kV2);
  EXPECT_EQ(r2[0].op, Op::kValidate);
  EXPECT_EQ(r2[1].op, Op::kPing);
  EXPECT_EQ(r2[1].word, 7u);
  EXPECT_EQ(r2[2].op, Op::kAdd);
  EXPECT_EQ(r2[2].args, (std::vector<std::string>{"/n"}));
  EXPECT_EQ(r2[2].number, 1);
}

TEST(ParserTest, V2LaterOpcodesAtEverySplit) {
  // LIST_KEYS (17) has no arguments; BARRIER (18) is a key and an i64 world
  // size, as ADD's arguments.
  std::string bytes = kValidate + Op1(v2::kListKeys) + Op1(v2::kBarrier) + Str("/b") + U64(4) +
                      Op1(v2::kListKeys) + Op1(v2::kBarrier) + Str("") + U64(uint64_t(-1));
  for (size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
    RequestParser p;
    auto reqs = ParseAll(bytes, chunk, p);
    ASSERT_EQ(reqs.size(), 5u) << "chunk " << chunk;
    EXPECT_EQ(reqs[1].op, Op::kListKeys);
    EXPECT_TRUE(reqs[1].args.empty());
    EXPECT_EQ(reqs[2].op, Op::kBarrier);
    EXPECT_EQ(reqs[2].args, (std::vector<std::string>{"/b"}));
    EXPECT_EQ(reqs[2].number, 4);
    EXPECT_EQ(reqs[3].op, Op::kListKeys);
    EXPECT_EQ(reqs[4].op, Op::kBarrier);
    EXPECT_EQ(reqs[4].args, (std::vector<std::string>{""}));
    EXPECT_EQ(reqs[4].number, -1);
  }
  EXPECT_STREQ(OpName(Op::kListKeys), "LIST_KEYS");
  EXPECT_STREQ(OpName(Op::kBarrier), "BARRIER");
}

// The bytes torch 2.14.1's client wrote (Debian's python3-torch, captured
// between it and torch's own server): the greeting (PING's nonce is its
// pid), set("a", "1"), list_keys(), barrier("b", 1), and a wait(["nope"])
// that timed out and was cancelled. No request carries the magic but the
// first: VALIDATE is sent once per connection.
TEST(ParserTest, Torch214ClientGoldenBytes) {
  const unsigned char wire[] = {
      0x00, 0xce, 0xf7, 0x85, 0x3c,                                    // VALIDATE
      0x0d, 0x23, 0x4f, 0x00, 0x00,                                    // PING 20259
      0x01, 0x02, 0,    0,    0,    0, 0, 0, 0,   '/', 'a',            // SET "/a"
      0x01, 0,    0,    0,    0,    0, 0, 0, '1',                      //   "1"
      0x11,                                                            // LIST_KEYS
      0x12, 0x02, 0,    0,    0,    0, 0, 0, 0,   '/', 'b',            // BARRIER "/b"
      0x01, 0,    0,    0,    0,    0, 0, 0,                           //   world size 1
      0x06, 0x01, 0,    0,    0,    0, 0, 0, 0,                        // WAIT 1 key
      0x05, 0,    0,    0,    0,    0, 0, 0, '/', 'n', 'o', 'p', 'e',  //   "/nope"
      0x0c,                                                            // CANCEL_WAIT
  };
  std::string bytes(reinterpret_cast<const char*>(wire), sizeof wire);
  for (size_t chunk : {size_t{1}, size_t{7}, sizeof wire}) {
    RequestParser p;
    auto r = ParseAll(bytes, chunk, p);
    ASSERT_EQ(r.size(), 7u);
    EXPECT_EQ(p.generation(), Generation::kV2);
    EXPECT_EQ(r[1].op, Op::kPing);
    EXPECT_EQ(r[1].word, 20259u);
    EXPECT_EQ(r[2].op, Op::kSet);
    EXPECT_EQ(r[2].args, (std::vector<std::string>{"/a", "1"}));
    EXPECT_EQ(r[3].op, Op::kListKeys);
    EXPECT_EQ(r[4].op, Op::kBarrier);
    EXPECT_EQ(r[4].args, (std::vector<std::string>{"/b"}));
    EXPECT_EQ(r[4].number, 1);
    EXPECT_EQ(r[5].op, Op::kWait);
    EXPECT_EQ(r[5].args, (std::vector<std::string>{"/nope"}));
    EXPECT_EQ(r[6].op, Op::kCancelWait);
  }
}

TEST(ParserTest, GenerationWaitsForTheMagic) {
  RequestParser p;
  std::string start = Op1(0) + U32(kValidationMagic).substr(0, 3);
  ASSERT_TRUE(p.Append(start.data(), start.size()));
  Request r;
  EXPECT_EQ(p.Next(&r), RequestParser::Result::kNeedMore);
  EXPECT_EQ(p.generation(), Generation::kUnknown);
  std::string last = U32(kValidationMagic).substr(3);
  ASSERT_TRUE(p.Append(last.data(), last.size()));
  EXPECT_EQ(p.Next(&r), RequestParser::Result::kRequest);
  EXPECT_EQ(p.generation(), Generation::kV2);
}

TEST(ParserTest, V1SetStartingWithZeroIsNotV2) {
  RequestParser p;
  auto reqs = ParseAll(Op1(v1::kSet) + Str("key") + Str("v"), 1, p);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(p.generation(), Generation::kV1);
}

TEST(ParserTest, EachErrorAtOnceWithoutWaitingAtEverySplit) {
  const std::string over_key = U64(kDefaultMaxKeyBytes + 1);
  const std::string over_value = U64(kDefaultMaxValueBytes + 1);
  const std::string over_count = U64(kDefaultMaxKeysPerRequest + 1);
  struct Case {
    std::string bytes;
    const char* error;
  } cases[] = {
      {Op1(v1::kSet) + U64(uint64_t{1} << 60), "key of"},  // 2^60-byte key
      {Op1(v1::kGet) + over_key, "key of"},
      {Op1(v1::kSet) + Str("k") + U64(uint64_t{1} << 40), "value of"},
      {Op1(v1::kSet) + Str("k") + over_value, "value of"},
      {kValidate + Op1(v2::kCompareSet) + Str("k") + Str("") + over_value, "value of"},
      {Op1(v1::kWait) + U64(uint64_t{1} << 62), "keys is over"},
      {Op1(v1::kCheck) + over_count, "keys is over"},
      {kValidate + Op1(v2::kMultiGet) + over_count, "keys is over"},
      {kValidate + Op1(v2::kMultiSet) + over_count, "keys is over"},
      {kValidate + Op1(v2::kMultiSet) + U64(uint64_t(-1)), "keys is over"},  // i64 -1
      {Op1(v1::kCancelWait + 1), "unknown v1 opcode 13"},
      {Op1(200), "unknown v1 opcode 200"},
      {kValidate + Op1(v2::kBarrier) + over_key, "key of"},
      {kValidate + Op1(v2::kBarrier + 1), "unknown v2 opcode 19"},
      {kValidate + Op1(255), "unknown v2 opcode 255"},
      // LIST_KEYS and BARRIER are v2's only: in v1 they are unknown.
      {Op1(v2::kListKeys), "unknown v1 opcode 17"},
  };
  for (const auto& c : cases) {
    for (size_t chunk = 1; chunk <= c.bytes.size(); ++chunk) {
      RequestParser p;
      bool error = false;
      ParseAll(c.bytes, chunk, p, &error);
      EXPECT_TRUE(error) << c.error << " chunk " << chunk;
      EXPECT_NE(p.error().find(c.error), std::string::npos) << p.error();
    }
  }
}

TEST(ParserTest, LimitsAtTheBoundaryAreAccepted) {
  std::string key(kDefaultMaxKeyBytes, 'k');
  RequestParser p;
  auto reqs = ParseAll(Op1(v1::kGet) + Str(key), 4096, p);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].args[0], key);
}

TEST(ParserTest, OneMessageAsAWholeIsBounded) {
  // Each value is within its limit, but the message is not: it must fail
  // even though every piece is parsed as it arrives.
  Limits limits;
  limits.max_buffered_bytes = 64 * 1024;
  RequestParser p(limits);
  std::string bytes = Op1(v1::kMultiSet) + U64(100);
  for (int i = 0; i < 100; ++i) bytes += Str("k" + std::to_string(i)) + Str(std::string(4096, 'v'));
  bool error = false;
  for (size_t i = 0; i < bytes.size() && !error; i += 1000) {
    if (!p.Append(bytes.data() + i, std::min<size_t>(1000, bytes.size() - i))) {
      error = true;
      break;
    }
    Request r;
    EXPECT_EQ(p.Next(&r), RequestParser::Result::kNeedMore);
  }
  EXPECT_TRUE(error);
  EXPECT_LE(p.held(), limits.max_buffered_bytes);
}

TEST(ParserTest, LimitsAreConfigurable) {
  Limits limits;
  limits.max_key_bytes = 4;
  RequestParser p(limits);
  bool error = false;
  ParseAll(Op1(v1::kGet) + Str("12345"), 100, p, &error);
  EXPECT_TRUE(error);
}

TEST(ParserTest, BufferedBytesAreBounded) {
  Limits limits;
  limits.max_buffered_bytes = 1024;
  RequestParser p(limits);
  std::string big(2048, 'x');
  EXPECT_FALSE(p.Append(big.data(), big.size()));
  EXPECT_NE(p.error().find("buffered"), std::string::npos);
}

TEST(ParserTest, AnUnfinishedRequestShowsItsKeysBeforeItsValue) {
  // Both generations: the head of a SET (its key, its value's length) and
  // a MULTI_SET's first pair; the server judges these keys while the value
  // has not come.
  for (const std::string& prefix : {std::string(), kValidate}) {
    uint8_t set = prefix.empty() ? v1::kSet : v2::kSet;
    uint8_t multi_set = prefix.empty() ? v1::kMultiSet : v2::kMultiSet;
    RequestParser p;
    Request r;
    std::string head = prefix + Op1(set) + Str("/trun/x") + U64(1 << 20) + "abc";
    ASSERT_TRUE(p.Append(head.data(), head.size()));
    if (!prefix.empty()) {
      ASSERT_EQ(p.Next(&r), RequestParser::Result::kRequest);  // VALIDATE
    }
    EXPECT_EQ(p.pending(), nullptr);
    ASSERT_EQ(p.Next(&r), RequestParser::Result::kNeedMore);
    ASSERT_NE(p.pending(), nullptr);
    EXPECT_EQ(p.pending()->op, Op::kSet);
    EXPECT_EQ(p.pending()->args, std::vector<std::string>{"/trun/x"});
    EXPECT_EQ(p.held(), 7u + 3u + 8u);  // the key, the value so far and its length

    RequestParser m;
    std::string pairs = prefix + Op1(multi_set) + U64(2) + Str("/w") + Str("v") + Str("/trun/y");
    ASSERT_TRUE(m.Append(pairs.data(), pairs.size()));
    if (!prefix.empty()) {
      ASSERT_EQ(m.Next(&r), RequestParser::Result::kRequest);
    }
    ASSERT_EQ(m.Next(&r), RequestParser::Result::kNeedMore);
    ASSERT_NE(m.pending(), nullptr);
    EXPECT_EQ(m.pending()->args, (std::vector<std::string>{"/w", "v", "/trun/y"}));
    std::string rest = Str("w");
    ASSERT_TRUE(m.Append(rest.data(), rest.size()));
    ASSERT_EQ(m.Next(&r), RequestParser::Result::kRequest);
    EXPECT_EQ(m.pending(), nullptr);
  }
}

TEST(ParserTest, ALargeValueInSmallPiecesIsParsedOnce) {
  RequestParser p;
  std::string value(1 << 20, 'v');
  std::string bytes = Op1(v1::kSet) + Str("k") + Str(value);
  auto reqs = ParseAll(bytes, 1000, p);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].args[1], value);
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(ParserTest, ABufferGrownForALargeMessageIsGivenBack) {
  RequestParser p;
  std::string value(1 << 20, 'v');
  // Whole, and in pieces that leave a partial field buffered each time.
  for (size_t chunk : {size_t{1} << 21, size_t{1000}}) {
    auto reqs =
        ParseAll(Op1(v1::kSet) + Str("k") + Str(value) + Op1(v1::kGet) + Str("k"), chunk, p);
    ASSERT_EQ(reqs.size(), 2u);
    EXPECT_EQ(reqs[0].args[1], value);
    EXPECT_EQ(p.allocated(), 0u);
  }
  // A partial message keeps what it needs until the rest comes.
  std::string get = Op1(v1::kGet) + Str(std::string(100, 'k'));
  EXPECT_TRUE(p.Append(get.data(), 50));
  Request r;
  EXPECT_EQ(p.Next(&r), RequestParser::Result::kNeedMore);
  EXPECT_GT(p.allocated(), 0u);
  EXPECT_TRUE(p.Append(get.data() + 50, get.size() - 50));
  EXPECT_EQ(p.Next(&r), RequestParser::Result::kRequest);
  EXPECT_EQ(p.allocated(), 0u);
}

}  // namespace
}  // namespace trun::store
