#include "proc/warm_protocol.h"

#include <gtest/gtest.h>

namespace trun::proc {
namespace {

using Kind = PythonCommand::Kind;

TEST(ParsePythonCommand, ScriptModuleAndCode) {
  auto s = ParsePythonCommand({"python3", "-u", "train.py", "--lr", "0.1"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, Kind::kScript);
  EXPECT_EQ(s->target, "train.py");
  EXPECT_EQ(s->args, (std::vector<std::string>{"--lr", "0.1"}));

  auto m = ParsePythonCommand({"/usr/bin/python3", "-u", "-m", "pkg.main", "-x"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, Kind::kModule);
  EXPECT_EQ(m->target, "pkg.main");
  EXPECT_EQ(m->args, std::vector<std::string>{"-x"});

  auto c = ParsePythonCommand({"python3", "-c", "print(1)", "a.py"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, Kind::kCode);
  EXPECT_EQ(c->target, "print(1)");
  EXPECT_EQ(c->args, std::vector<std::string>{"a.py"});
}

TEST(ParsePythonCommand, RefusesWhatItCannotRun) {
  EXPECT_FALSE(ParsePythonCommand({"python3"}).ok());
  EXPECT_FALSE(ParsePythonCommand({"python3", "-u"}).ok());
  EXPECT_FALSE(ParsePythonCommand({"python3", "-u", "-m"}).ok());
  EXPECT_FALSE(ParsePythonCommand({"python3", "-X", "dev", "x.py"}).ok());
  EXPECT_FALSE(ParsePythonCommand({"python3", "-"}).ok());
}

// The bytes the warm process's parser (warm_server.cc) reads.
TEST(EncodeRequest, GoldenBytes) {
  WarmRequest r{{Kind::kModule, "m", {"a", ""}}, {"A=1", "B="}, "/w", 42};
  std::string frame = EncodeRequest(r);
  const std::string payload(
      "trun-warm-1\0"
      "42\0/w\0module\0m\0"
      "2\0a\0\0"
      "2\0A=1\0B=\0",
      41);
  ASSERT_EQ(frame.size(), 4 + payload.size());
  EXPECT_EQ(DecodeFrameLength(frame.data()), payload.size());
  EXPECT_EQ(frame.substr(0, 4), std::string("\0\0\0\x29", 4));
  EXPECT_EQ(frame.substr(4), payload);
}

TEST(DecodeFrameLength, BigEndian) {
  const char head[4] = {'\x01', '\x02', '\x03', '\x04'};
  EXPECT_EQ(DecodeFrameLength(head), 0x01020304u);
}

TEST(DecodeReply, PidOrReason) {
  auto ok = DecodeReply("ok 1234");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 1234);
  auto err = DecodeReply("error cannot import numpy: ModuleNotFoundError");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().message(), "warm start: cannot import numpy: ModuleNotFoundError");
  EXPECT_FALSE(DecodeReply("ok").ok());
  EXPECT_FALSE(DecodeReply("ok 12x").ok());
  EXPECT_FALSE(DecodeReply("ok -3").ok());
  EXPECT_FALSE(DecodeReply("").ok());
}

}  // namespace
}  // namespace trun::proc
