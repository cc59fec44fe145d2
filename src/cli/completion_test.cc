#include "cli/completion.h"

#include <gtest/gtest.h>

#include <cctype>

namespace trun::cli {
namespace {

CompletionWords Sample() {
  return {{{"--nnodes", true}, {"--standalone", false}, {"-m", false}, {"-r", true}},
          {"run", "status"},
          {{"--scheduler", true}, {"--dryrun", false}},
          {"dist.ddp", "utils.sh"}};
}

TEST(CompletionTest, EveryShellGetsEveryWord) {
  for (const char* shell : {"bash", "zsh", "tcsh"}) {
    auto s = CompletionScript(shell, Sample());
    ASSERT_TRUE(s.ok()) << shell;
    for (const char* word : {"nnodes", "standalone", "status", "dist.ddp", "utils.sh"}) {
      EXPECT_NE(s->find(word), std::string::npos) << shell << " lacks " << word;
    }
  }
  EXPECT_FALSE(CompletionScript("fish", Sample()).ok());
}

TEST(CompletionTest, BashKnowsWhichFlagsTakeValues) {
  auto s = CompletionScript("bash", Sample());
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("launch_value_flags=\" --nnodes -r \""), std::string::npos) << *s;
  EXPECT_NE(s->find("run_value_flags=\" --scheduler \""), std::string::npos) << *s;
  EXPECT_NE(s->find("complete -o filenames -F _trun trun"), std::string::npos);
}

TEST(CompletionTest, ZshRegistersOrRuns) {
  auto s = CompletionScript("zsh", Sample());
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->starts_with("#compdef trun\n"));
  EXPECT_NE(s->find("compdef _trun trun"), std::string::npos);
}

TEST(CompletionTest, TcshSplitsLongAndShortFlags) {
  auto s = CompletionScript("tcsh", Sample());
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("'c/--/(nnodes standalone)/'"), std::string::npos) << *s;
  EXPECT_NE(s->find("'c/-/(m r)/' 'C@*/@f@' 'p/1/(run status)/'"), std::string::npos) << *s;
  EXPECT_NE(s->find("'n/run/(dist.ddp utils.sh)/'"), std::string::npos) << *s;
}

}  // namespace
}  // namespace trun::cli
