#include "common/strings.h"

#include <gtest/gtest.h>

namespace trun {
namespace {

TEST(StringsTest, SplitKeepsEmptyFields) {
  EXPECT_EQ(Split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(Split("", ','), (std::vector<std::string>{""}));
}

TEST(StringsTest, ParseIntRejectsJunk) {
  EXPECT_EQ(ParseInt("42"), 42);
  EXPECT_EQ(ParseInt(" -3 "), -3);
  EXPECT_EQ(ParseInt("+7"), 7);
  EXPECT_FALSE(ParseInt("4x"));
  EXPECT_FALSE(ParseInt(""));
  EXPECT_FALSE(ParseInt("99999999999999999999"));
}

TEST(StringsTest, ParseDouble) {
  EXPECT_DOUBLE_EQ(*ParseDouble("0.1"), 0.1);
  EXPECT_FALSE(ParseDouble("fast"));
}

TEST(StringsTest, ParsePythonFloatReadsWhatPythonsFloatDoes) {
  EXPECT_DOUBLE_EQ(*ParsePythonFloat("+0.5"), 0.5);
  EXPECT_DOUBLE_EQ(*ParsePythonFloat(" 1_0.5 "), 10.5);
  EXPECT_DOUBLE_EQ(*ParsePythonFloat("-2e1"), -20);
  EXPECT_DOUBLE_EQ(*ParsePythonFloat(".5"), 0.5);
  for (const char* junk : {"+-1", "++1", "1__0", "_1", "1_", "+", "1_.5", "0x10", ""}) {
    EXPECT_FALSE(ParsePythonFloat(junk)) << junk;
  }
}

// Python's str.strip() and int() take off every ASCII whitespace.
TEST(StringsTest, StripSpaceAndParsePythonIntAsPython) {
  EXPECT_EQ(StripSpace("\n\t h:1 \r\f\v"), "h:1");
  EXPECT_EQ(StripSpace(" \r\n "), "");
  EXPECT_EQ(StripSpace(""), "");
  EXPECT_EQ(ParsePythonInt(" 1_000\r\n"), 1000);
  EXPECT_EQ(ParsePythonFloat("\v2.5\r"), 2.5);
  EXPECT_FALSE(ParsePythonInt("1 0").has_value());
}

TEST(StringsTest, JoinSomeNamesTheFirstFewAndCountsTheRest) {
  EXPECT_EQ(JoinSome({"a", "b"}, 2), "a, b");
  EXPECT_EQ(JoinSome({"a", "b", "c"}, 5, 2), "a, b and 3 more");
  // Only the first few collected: the total counts the rest.
  EXPECT_EQ(JoinSome({"a"}, 10'000, 8), "a and 9999 more");
  std::vector<std::string> many(10'000, "node");
  EXPECT_EQ(JoinSome(many, many.size()),
            "node, node, node, node, node, node, node, node and 9992 more");
  EXPECT_EQ(JoinSome({}, 0), "");
}

TEST(StringsTest, ClosestMatchFindsTypos) {
  std::vector<std::string> opts = {"--nproc-per-node", "--nnodes", "--tee"};
  EXPECT_EQ(ClosestMatch("--nproc-per-nod", opts), "--nproc-per-node");
  EXPECT_EQ(ClosestMatch("--nproc", opts), "--nproc-per-node");
  EXPECT_EQ(ClosestMatch("--completely-different", opts), "");
}

TEST(StringsTest, Base64RoundTripsEveryLength) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("/a/y"), "L2EveQ==");
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (size_t n = 0; n <= bytes.size(); n += 17) {
    EXPECT_EQ(Base64Decode(Base64Encode(bytes.substr(0, n))), bytes.substr(0, n));
  }
}

TEST(StringsTest, Base64DecodeRejectsJunk) {
  EXPECT_FALSE(Base64Decode("Zg="));
  EXPECT_FALSE(Base64Decode("Z!=="));
  EXPECT_FALSE(Base64Decode("Zg==Zg=="));
  EXPECT_FALSE(Base64Decode("Z=g="));
}

TEST(StringsTest, ParseBoolTakesTheIniWords) {
  for (const char* t : {"true", "TRUE", "1", "yes", "On", " on "})
    EXPECT_EQ(ParseBool(t), true) << t;
  for (const char* f : {"false", "False", "0", "no", "OFF"}) EXPECT_EQ(ParseBool(f), false) << f;
  for (const char* x : {"", "maybe", "2", "t", "y"}) EXPECT_FALSE(ParseBool(x)) << x;
}

TEST(StringsTest, ShellQuoteIsShlexQuote) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("main.py"), "main.py");
  EXPECT_EQ(ShellQuote("--lr=0.1,a:b@c%d+e/f-g"), "--lr=0.1,a:b@c%d+e/f-g");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\"'\"'s'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
}

}  // namespace
}  // namespace trun
