#include "store/parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace trun::store {
namespace {

// Golden bytes, built by hand from the grammar in docs/store-protocol.md.
std::string U64(uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
std::string U32(uint32_t v) { return std::string(reinterpret_cast<char*>(&v), 4); }
std::string Str(const std::string& s) { return U64(s.size()) + s; }
std::string Op1(uint8_t op) { return std::string(1, static_cast<char>(op)); }

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
  std::string bytes = kValidate + Op1(v2::kPing) + U32(77) + Op1(v2::kSet) + Str("k") + Str("v") +
                      Op1(v2::kMultiSet) + U64(2) + Str("a") + Str("1") + Str("b") + Str("2") +
                      Op1(v2::kMultiGet) + U64(2) + Str("a") + Str("b") + Op1(v2::kAppend) +
                      Str("k") + Str("w") + Op1(v2::kCancelWait) + Op1(v2::kQueuePush) + Str("q") +
                      Str("item") + Op1(v2::kQueuePop) + Str("q") + Op1(v2::kQueueLen) + Str("q") +
                      Op1(v2::kDeleteKey) + Str("k") + Op1(v2::kGetNumKeys);
  for (size_t chunk = 1; chunk <= bytes.size(); ++chunk) {
    RequestParser p;
    auto reqs = ParseAll(bytes, chunk, p);
    ASSERT_EQ(reqs.size(), 12u) << "chunk " << chunk;
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
  }
}

TEST(ParserTest, V1SetStartingWithZeroIsNotV2) {
  RequestParser p;
  auto reqs = ParseAll(Op1(v1::kSet) + Str("key") + Str("v"), 1, p);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(p.generation(), Generation::kV1);
}

TEST(ParserTest, HostileLengthsFailAtOnceWithoutWaiting) {
  for (const std::string& bytes : {
           Op1(v1::kSet) + U64(uint64_t{1} << 60),              // absurd key length
           Op1(v1::kSet) + Str("k") + U64(uint64_t{1} << 40),   // absurd value length
           Op1(v1::kWait) + U64(uint64_t{1} << 62),             // absurd key count
           kValidate + Op1(v2::kMultiSet) + U64(uint64_t(-1)),  // negative i64 count
           Op1(200),                                            // unknown opcode
           kValidate + Op1(v2::kQueueLen + 1),                  // unknown v2 opcode
       }) {
    RequestParser p;
    bool error = false;
    ParseAll(bytes, bytes.size(), p, &error);
    EXPECT_TRUE(error);
    EXPECT_FALSE(p.error().empty());
  }
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

TEST(ParserTest, ALargeValueInSmallPiecesIsParsedOnce) {
  RequestParser p;
  std::string value(1 << 20, 'v');
  std::string bytes = Op1(v1::kSet) + Str("k") + Str(value);
  auto reqs = ParseAll(bytes, 1000, p);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].args[1], value);
  EXPECT_EQ(p.buffered(), 0u);
}

}  // namespace
}  // namespace trun::store
