#include "specs/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trun::specs {
namespace {

namespace fs = std::filesystem;

TEST(IniTest, ParsesConfigParsersSyntax) {
  auto s = ParseIni(
      "# comment\n[local]\nlog_dir = /x\nprepend_cwd: True\n; another\n"
      "[component:dist.ddp]\nj=2x2\nscript_args = --lr 0.1\n  --epochs 2\nenv = A=B,C=D\n",
      "f");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].entries[1], (std::pair<std::string, std::string>{"prepend_cwd", "True"}));
  EXPECT_EQ((*s)[1].name, "component:dist.ddp");
  EXPECT_EQ((*s)[1].entries[1].second, "--lr 0.1\n--epochs 2");
  EXPECT_EQ((*s)[1].entries[2].second, "A=B,C=D");
  auto again = ParseIni(FormatIni(*s), "f");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[1].entries[1].second, "--lr 0.1\n--epochs 2");
}

TEST(IniTest, ErrorsNameFileAndLine) {
  EXPECT_NE(ParseIni("k = v\n", "cfg").status().message().find("cfg, line 1: a key before"),
            std::string::npos);
  EXPECT_NE(ParseIni("[a]\nk=1\nk=2\n", "cfg").status().message().find("line 3: key 'k' appears"),
            std::string::npos);
  EXPECT_NE(ParseIni("[a]\n[a]\n", "cfg").status().message().find("section [a] appears twice"),
            std::string::npos);
  EXPECT_FALSE(ParseIni("[a]\njunk\n", "cfg").ok());
}

class TrunConfigTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("cfg" + std::to_string(getpid()));
    fs::create_directories(dir_ / "home");
    fs::create_directories(dir_ / "proj");
    old_cwd_ = fs::current_path();
    fs::current_path(dir_ / "proj");
    old_home_ = getenv("HOME") ? getenv("HOME") : "";
    setenv("HOME", (dir_ / "home").c_str(), 1);
    unsetenv("TRUNCONFIG");
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    setenv("HOME", old_home_.c_str(), 1);
    unsetenv("TRUNCONFIG");
    fs::remove_all(dir_);
  }
  fs::path dir_, old_cwd_;
  std::string old_home_;
};

TEST_F(TrunConfigTest, HomeWinsOverTheProjectAndTrunconfigReplacesBoth) {
  std::ofstream(dir_ / "home" / ".trunconfig") << "[local]\nlog_dir = /home-logs\n";
  std::ofstream(dir_ / "proj" / ".trunconfig")
      << "[local]\nlog_dir = /proj-logs\nprepend_cwd = yes\n[cli:run]\ncomponent = utils.echo\n";
  auto c = TrunConfig::Load();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_EQ(c->Get("local", "log_dir"), "/home-logs");
  EXPECT_EQ(c->Get("cli:run", "component"), "utils.echo");

  RunOpts opts;
  opts.Add("log_dir", OptType::kStr, "logs");
  opts.Add("prepend_cwd", OptType::kBool, "cwd first", false);
  Cfg cfg{{"log_dir", std::string("/cli")}};
  ASSERT_TRUE(c->ApplySchedulerSection("local", opts, cfg).ok());
  EXPECT_EQ(std::get<std::string>(cfg["log_dir"]), "/cli");
  EXPECT_TRUE(std::get<bool>(cfg["prepend_cwd"]));

  std::ofstream(dir_ / "only") << "[local]\nlog_dir = None\n";
  setenv("TRUNCONFIG", (dir_ / "only").c_str(), 1);
  auto only = TrunConfig::Load();
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(only->files().size(), 1u);
  Cfg none;
  ASSERT_TRUE(only->ApplySchedulerSection("local", opts, none).ok());
  EXPECT_TRUE(std::holds_alternative<std::monostate>(none["log_dir"]));

  setenv("TRUNCONFIG", "", 1);
  EXPECT_TRUE(TrunConfig::Load()->files().empty());
  setenv("TRUNCONFIG", (dir_ / "missing").c_str(), 1);
  EXPECT_FALSE(TrunConfig::Load().ok());
}

TEST_F(TrunConfigTest, BadValuesAreErrorsUnknownKeysWarnings) {
  std::ofstream(dir_ / "proj" / ".trunconfig") << "[local]\nprepend_cwd = perhaps\nnope = 1\n";
  auto c = TrunConfig::Load();
  ASSERT_TRUE(c.ok());
  RunOpts opts;
  opts.Add("prepend_cwd", OptType::kBool, "cwd first", false);
  Cfg cfg;
  Status s = c->ApplySchedulerSection("local", opts, cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(".trunconfig: [local] prepend_cwd: expected"), std::string::npos)
      << s.message();
}

TEST(RunOptsSectionTest, PlaceholdersForRequiredDefaultsForTheRest) {
  RunOpts opts;
  opts.Add("queue", OptType::kStr, "Volcano queue to schedule job in", {}, true);
  opts.Add("tags", OptType::kListStr, "tags", std::vector<std::string>{"a", "b"});
  opts.Add("quiet", OptType::kBool, "quiet", false);
  auto all = RunOptsSection("kubernetes", opts, false);
  EXPECT_EQ(FormatIni({all}),
            "[kubernetes]\nqueue = #FIXME:(str) Volcano queue to schedule job in\n"
            "tags = a;b\nquiet = False\n");
  EXPECT_EQ(RunOptsSection("kubernetes", opts, true).entries.size(), 1u);
}

}  // namespace
}  // namespace trun::specs
