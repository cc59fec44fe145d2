#include "components/python_component.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace trun::components {
namespace {

TEST(PythonComponent, NamesAFunctionInAFileOrAModule) {
  EXPECT_TRUE(IsPythonComponent("./my_component.py:trainer"));
  EXPECT_TRUE(IsPythonComponent("/abs/c.py:_f2"));
  EXPECT_TRUE(IsPythonComponent("pkg.components:trainer"));
  EXPECT_TRUE(IsPythonComponent("mod:fn"));
  EXPECT_FALSE(IsPythonComponent("dist.ddp"));
  EXPECT_FALSE(IsPythonComponent("./c.py"));
  EXPECT_FALSE(IsPythonComponent("./c.yaml"));
  EXPECT_FALSE(IsPythonComponent("./c.py:"));
  EXPECT_FALSE(IsPythonComponent("pkg.mod:fn-x"));
  EXPECT_FALSE(IsPythonComponent("1pkg:fn"));
}

// A stand-in for `python -m trun._component`: the protocol, without Python.
// It answers `describe` with fixed parameters, refuses the component
// `bad.py:fn` as the linter would, and for `build` keeps its payload in a
// file and prints a fixed AppDef.
class FakeLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/fake_loader" + std::to_string(::getpid());
    ::mkdir(dir_.c_str(), 0700);
    const std::string script = dir_ + "/python";
    std::ofstream(script) << R"(#!/bin/sh
# $1 $2: -m trun._component; $3 the verb; $4 the component; $5 the payload.
case "$4" in bad.py:fn) echo "bad.py:3: parameter 'x': Missing type annotation" >&2; exit 2;; esac
if [ "$3" = describe ]; then
  cat <<'JSON'
{"description": "Trains.\nMore.", "params": [
  {"name": "args", "type": "varargs", "help": "script args"},
  {"name": "lr", "type": "float", "default": 0.1, "help": "learning rate"},
  {"name": "tags", "type": "list", "default": null, "help": " "},
  {"name": "c", "type": "str", "aliases": ["-cn"], "help": "config"},
  {"name": "debug", "type": "bool", "default": false}]}
JSON
else
  printf '%s' "$5" > ")" + dir_ + R"(/payload.json"
  echo '{"name": "train", "roles": [{"name": "t", "image": "i", "entrypoint": "echo", "num_replicas": 2}]}'
fi
)";
    ::chmod(script.c_str(), 0755);
    const char* old = std::getenv("PYTHON_EXEC");
    old_ = old ? old : "";
    ::setenv("PYTHON_EXEC", script.c_str(), 1);
  }
  void TearDown() override {
    if (old_.empty()) {
      ::unsetenv("PYTHON_EXEC");
    } else {
      ::setenv("PYTHON_EXEC", old_.c_str(), 1);
    }
  }
  std::string dir_, old_;
};

TEST_F(FakeLoader, DeclaresParsesAndBuilds) {
  auto c = LoadPythonComponent("./c.py:train", "/nonexistent/bin/trun");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->summary, "Trains.");
  ASSERT_EQ(c->params.size(), 5u);
  EXPECT_EQ(c->params[0].type, ParamType::kVarArgs);
  EXPECT_EQ(c->params[1].type, ParamType::kFloat);
  EXPECT_TRUE(c->params[3].required);
  EXPECT_EQ(c->params[3].aliases, std::vector<std::string>{"-cn"});

  auto parsed =
      ParseComponentArgs(*c, {"-cn", "x", "--tags", "a,b", "--lr", "2", "s.py", "-v"}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto app = Materialize(*c, parsed->args);
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_EQ(app->roles[0].num_replicas, 2);
  auto payload = ReadFile(dir_ + "/payload.json");
  ASSERT_TRUE(payload.ok());
  auto j = nlohmann::json::parse(*payload);
  EXPECT_EQ(j["values"]["lr"], 2.0);
  EXPECT_EQ(j["values"]["tags"], nlohmann::json({"a", "b"}));
  EXPECT_EQ(j["values"]["c"], "x");
  EXPECT_EQ(j["values"]["debug"], false);
  EXPECT_EQ(j["varargs"], nlohmann::json({"s.py", "-v"}));
}

TEST_F(FakeLoader, TheLoadersRefusalIsInvalidArgument) {
  auto c = LoadPythonComponent("bad.py:fn", "/nonexistent/bin/trun");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "bad.py:3: parameter 'x': Missing type annotation");
}

TEST(PythonComponent, AnInterpreterThatCannotRunSaysWhichAndHow) {
  const char* old = std::getenv("PYTHON_EXEC");
  std::string saved = old ? old : "";
  ::setenv("PYTHON_EXEC", "/no/such/python", 1);
  auto c = LoadPythonComponent("./c.py:f", "/nonexistent/bin/trun");
  saved.empty() ? ::unsetenv("PYTHON_EXEC") : ::setenv("PYTHON_EXEC", saved.c_str(), 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIOError);
  EXPECT_NE(c.status().message().find("'/no/such/python'"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace trun::components
