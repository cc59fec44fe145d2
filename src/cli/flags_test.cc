#include "cli/flags.h"

#include <gtest/gtest.h>

namespace trun::cli {
namespace {

const std::vector<Flag> kFlags = {{{"--scheduler", "-s"}, true}, {{"--wait"}, false}};

TEST(FlagsTest, ValuesFlagsAndPositionals) {
  auto f = ParseFlags("run", kFlags, {"-s", "local", "--wait", "a", "--scheduler=x"}, false);
  ASSERT_FALSE(f.ok());  // --scheduler twice
  EXPECT_NE(f.status().message().find("--scheduler is given more than once"), std::string::npos);
  auto g = ParseFlags("run", kFlags, {"--scheduler=local", "comp", "--wait", "x"}, true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->Get("--scheduler"), "local");
  EXPECT_FALSE(g->Has("--wait"));
  EXPECT_EQ(g->positionals, (std::vector<std::string>{"comp", "--wait", "x"}));
  auto h = ParseFlags("run", kFlags, {"--wait", "--", "-s", "x"}, false);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->positionals, (std::vector<std::string>{"-s", "x"}));
}

TEST(FlagsTest, MistakesTogether) {
  auto f = ParseFlags("status", kFlags, {"--wiat", "--wait=1", "-s"}, false);
  ASSERT_FALSE(f.ok());
  const std::string& m = f.status().message();
  EXPECT_NE(m.find("unknown option '--wiat' (did you mean '--wait'?)"), std::string::npos);
  EXPECT_NE(m.find("--wait takes no value"), std::string::npos);
  EXPECT_NE(m.find("-s needs a value"), std::string::npos);
  EXPECT_NE(m.find("see `trun status --help`"), std::string::npos);
}

}  // namespace
}  // namespace trun::cli
