#include "components/component.h"

#include <gtest/gtest.h>

namespace trun::components {
namespace {

using specs::CfgValue;

Component Example() {
  Component c;
  c.name = "example";
  c.description = "An example.";
  c.params = {
      {"args", ParamType::kVarArgs, "program args", {}, false, {}},
      {"script", ParamType::kStr, "the script", {}, true, {}},
      {"j", ParamType::kStr, "nodes x procs", std::string("1x2"), false, {}},
      {"h", ParamType::kStr, "named resource", {}, false, {}},
      {"max_retries", ParamType::kInt, "retries", 0LL, false, {}},
      {"lr", ParamType::kFloat, "learning rate", 0.1, false, {}},
      {"debug", ParamType::kBool, "debug flags", false, false, {}},
      {"mounts", ParamType::kList, "mounts", {}, false, {}},
      {"env", ParamType::kDict, "environment", {}, false, {}},
      {"config_name", ParamType::kStr, "config", std::string("c"), false, {"-cn"}},
  };
  c.build = [](const ComponentArgs&) -> Result<specs::AppDef> { return specs::AppDef{}; };
  return c;
}

ComponentArgs Parse(std::vector<std::string> argv, std::map<std::string, std::string> cfg = {}) {
  auto r = ParseComponentArgs(Example(), argv, cfg);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->args : ComponentArgs{};
}

std::string Error(std::vector<std::string> argv, std::map<std::string, std::string> cfg = {}) {
  auto r = ParseComponentArgs(Example(), argv, cfg);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(ComponentArgsTest, OptionsInEverySpelling) {
  auto a = Parse({"--script", "main.py", "-j2x4", "-h", "gpu.small", "--max-retries=3", "--lr",
                  "-0.5", "--debug", "True", "--mounts", "type=bind, src=/a", "--env", "A=1,B=x,y",
                  "-cn", "cfg"});
  EXPECT_EQ(a.Str("script"), "main.py");
  EXPECT_EQ(a.Str("j"), "2x4");
  EXPECT_EQ(a.Str("h"), "gpu.small");
  EXPECT_EQ(a.Int("max_retries"), 3);
  EXPECT_DOUBLE_EQ(a.Float("lr"), -0.5);
  EXPECT_TRUE(a.Bool("debug"));
  EXPECT_EQ(a.List("mounts"), (std::vector<std::string>{"type=bind", "src=/a"}));
  EXPECT_EQ(a.Dict("env"), (std::map<std::string, std::string>{{"A", "1"}, {"B", "x,y"}}));
  EXPECT_EQ(a.Str("config_name"), "cfg");
  EXPECT_TRUE(a.varargs.empty());
}

TEST(ComponentArgsTest, DefaultsAndNone) {
  auto a = Parse({"--script", "x.py"});
  EXPECT_EQ(a.Str("j"), "1x2");
  EXPECT_TRUE(a.IsNone("h"));
  EXPECT_TRUE(a.IsNone("mounts"));
  EXPECT_FALSE(a.Bool("debug"));
  EXPECT_EQ(a.Str("config_name"), "c");
  // An empty list or dict is None, as TorchX decodes it.
  EXPECT_TRUE(Parse({"--script", "x", "--env", ""}).IsNone("env"));
}

TEST(ComponentArgsTest, VarArgsTakeEverythingFromTheFirstPositional) {
  auto a = Parse({"--script", "x.py", "data", "--lr", "0.2", "-j", "3"});
  EXPECT_EQ(a.varargs, (std::vector<std::string>{"data", "--lr", "0.2", "-j", "3"}));
  EXPECT_DOUBLE_EQ(a.Float("lr"), 0.1);
  auto b = Parse({"--script", "x.py", "--", "--lr", "0.2"});
  EXPECT_EQ(b.varargs, (std::vector<std::string>{"--lr", "0.2"}));
  auto c = Parse({"--", "--script", "x"}, {{"script", "from-config.py"}});
  EXPECT_EQ(c.varargs, (std::vector<std::string>{"--script", "x"}));
}

TEST(ComponentArgsTest, ConfigDefaultsSitBetweenCommandLineAndDeclaration) {
  std::map<std::string, std::string> cfg = {
      {"script", "cfg.py"}, {"j", "4x4"}, {"debug", "yes"}, {"args", "--a 1\n--b 2"}};
  auto a = Parse({"-j", "1x1"}, cfg);
  EXPECT_EQ(a.Str("script"), "cfg.py");  // required, satisfied by the config
  EXPECT_EQ(a.Str("j"), "1x1");
  EXPECT_TRUE(a.Bool("debug"));
  EXPECT_EQ(a.varargs, (std::vector<std::string>{"--a", "1", "--b", "2"}));
}

TEST(ComponentArgsTest, EveryMistakeAtOnce) {
  std::string e = Error({"--scirpt", "x.py", "--max_retries", "many", "--debug", "maybe", "-j", "1",
                         "-j", "2", "--lr"});
  for (const char* needle :
       {"unrecognized argument '--scirpt' (did you mean '--script'?)",
        "argument --max_retries: invalid int value: 'many'",
        "argument --debug: invalid bool (true or false) value: 'maybe'",
        "argument -j is given more than once", "argument --lr: expected one argument",
        "the argument --script is required", "see `trun run example --help`"}) {
    EXPECT_NE(e.find(needle), std::string::npos) << needle << "\n" << e;
  }
  EXPECT_NE(Error({"--script", "x"}, {{"nope", "1"}}).find("sets 'nope', which is not"),
            std::string::npos);
  EXPECT_NE(Error({"--script", "x", "--env", "novalue"}).find("argument --env"), std::string::npos);
}

TEST(ComponentArgsTest, PositionalsWithoutVarArgsAreRejected) {
  Component c = Example();
  c.params.erase(c.params.begin());
  auto r = ParseComponentArgs(c, {"--script", "x", "extra"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unrecognized arguments: extra"), std::string::npos);
}

TEST(ComponentArgsTest, HelpListsEveryArgument) {
  auto r = ParseComponentArgs(Example(), {"-j", "2", "--help"}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  std::string h = ComponentHelp(Example());
  EXPECT_NE(h.find("usage: trun run [run options] example --script SCRIPT [-j J]"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("--script SCRIPT"), std::string::npos);
  EXPECT_NE(h.find("the script (required)"), std::string::npos);
  EXPECT_NE(h.find("--max_retries, --max-retries MAX_RETRIES"), std::string::npos) << h;
  EXPECT_NE(h.find("nodes x procs (default: 1x2)"), std::string::npos);
  EXPECT_NE(h.find("--config_name, --config-name, -cn CONFIG_NAME"), std::string::npos) << h;
  EXPECT_NE(h.find("[-cn CONFIG_NAME] [args ...]\n"), std::string::npos) << h;
}

}  // namespace
}  // namespace trun::components
