#include "specs/runopts.h"

#include <gtest/gtest.h>

namespace trun::specs {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs Dict(std::string_view s) {
  auto d = ToDict(s);
  EXPECT_TRUE(d.ok()) << s << ": " << d.status().message();
  return d.ok() ? *d : Pairs{};
}

TEST(ToDictTest, TorchXsExamples) {
  EXPECT_EQ(Dict(""), Pairs{});
  EXPECT_EQ(Dict("FOO=v1"), (Pairs{{"FOO", "v1"}}));
  EXPECT_EQ(Dict("FOO=''"), (Pairs{{"FOO", ""}}));
  EXPECT_EQ(Dict("FOO=\"\""), (Pairs{{"FOO", ""}}));
  EXPECT_EQ(Dict("FOO=v1,v2"), (Pairs{{"FOO", "v1,v2"}}));
  EXPECT_EQ(Dict("FOO=v1;v2"), (Pairs{{"FOO", "v1;v2"}}));
  EXPECT_EQ(Dict("FOO=v1,v2,BAR=v3"), (Pairs{{"FOO", "v1,v2"}, {"BAR", "v3"}}));
  EXPECT_EQ(Dict("FOO=v1;v2,BAR=v3"), (Pairs{{"FOO", "v1;v2"}, {"BAR", "v3"}}));
  EXPECT_EQ(Dict("FOO=v1;v2;BAR=v3"), (Pairs{{"FOO", "v1;v2"}, {"BAR", "v3"}}));
  EXPECT_EQ(Dict("FOO=\"value with = and , and ;\""), (Pairs{{"FOO", "value with = and , and ;"}}));
  EXPECT_EQ(Dict(" a = 1 , b = 2 "), (Pairs{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(Dict("a=1,a=2"), (Pairs{{"a", "2"}}));
}

TEST(ToDictTest, Malformed) {
  EXPECT_FALSE(ToDict("FOO").ok());
  EXPECT_FALSE(ToDict("FOO=").ok());
  EXPECT_FALSE(ToDict("FOO=v1,=v2").ok());
  EXPECT_FALSE(ToDict("FOO=v1 BAR=v2").ok());
}

TEST(ToListTest, SplitsAndTrims) {
  EXPECT_EQ(ToList(""), std::vector<std::string>{});
  EXPECT_EQ(ToList(" a, b ,c"), (std::vector<std::string>{"a", "b", "c"}));
}

RunOpts Opts() {
  RunOpts o;
  o.Add("queue", OptType::kStr, "queue to submit to", {}, true);
  o.Add("log_dir", OptType::kStr, "where logs go");
  o.Add("count", OptType::kInt, "a count", 3LL);
  o.Add("ratio", OptType::kFloat, "a ratio", 0.5);
  o.Add("quiet", OptType::kBool, "less output", false);
  o.Add("tags", OptType::kListStr, "tags", std::vector<std::string>{"a"});
  o.Add("labels", OptType::kDictStr, "labels");
  return o;
}

TEST(RunOptsTest, CastsByTorchXsRules) {
  RunOpts o = Opts();
  auto cfg = o.CfgFromStr("queue=q1,count=7,ratio=2,quiet=ON,tags=x;y,labels=a:1;b:2", "k8s");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(std::get<std::string>((*cfg)["queue"]), "q1");
  EXPECT_EQ(std::get<long long>((*cfg)["count"]), 7);
  EXPECT_EQ(std::get<double>((*cfg)["ratio"]), 2.0);
  EXPECT_TRUE(std::get<bool>((*cfg)["quiet"]));
  EXPECT_EQ(std::get<std::vector<std::string>>((*cfg)["tags"]),
            (std::vector<std::string>{"x", "y"}));
  auto labels = std::get<std::map<std::string, std::string>>((*cfg)["labels"]);
  EXPECT_EQ(labels.at("b"), "2");
  // List values need no quotes: the last delimiter before a key splits.
  auto lists = o.CfgFromStr("tags=a,b,c,queue=q", "k8s");
  ASSERT_TRUE(lists.ok());
  EXPECT_EQ(std::get<std::vector<std::string>>((*lists)["tags"]).size(), 3u);
  // camelCase spellings find the option.
  auto camel = o.CfgFromStr("logDir=/x", "k8s");
  ASSERT_TRUE(camel.ok());
  EXPECT_EQ(std::get<std::string>((*camel)["log_dir"]), "/x");
}

TEST(RunOptsTest, BadKeysAndValuesAreErrorsAllAtOnce) {
  auto cfg = Opts().CfgFromStr("queu=q,count=many,quiet=maybe,labels=a", "k8s");
  ASSERT_FALSE(cfg.ok());
  const std::string& e = cfg.status().message();
  for (const char* needle : {"'queu' is not an option of the k8s scheduler (did you mean 'queue'?)",
                             "count: expected an integer, got 'many'",
                             "quiet: expected true/1/yes/on", "labels: expected key:value pairs"}) {
    EXPECT_NE(e.find(needle), std::string::npos) << needle << "\n" << e;
  }
}

TEST(RunOptsTest, ResolveFillsDefaultsAndNeedsRequired) {
  RunOpts o = Opts();
  auto missing = o.Resolve({}, "k8s");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("needs run option queue"), std::string::npos);
  auto ok = o.Resolve({{"queue", std::string("q")}}, "k8s");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(std::get<long long>((*ok)["count"]), 3);
  EXPECT_TRUE(std::holds_alternative<std::monostate>((*ok)["log_dir"]));
  auto wrong = o.Resolve({{"queue", std::string("q")}, {"count", std::string("x")}}, "k8s");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("must be of type int"), std::string::npos);
}

TEST(RunOptsTest, FormatIsTorchXsUsage) {
  RunOpts o;
  o.Add("queue", OptType::kStr, "queue to submit to", {}, true);
  o.Add("quiet", OptType::kBool, "less output", false);
  o.Add("tags", OptType::kListStr, "tags", std::vector<std::string>{"a", "b"});
  EXPECT_EQ(o.Format(),
            "    usage:\n        queue=QUEUE,[quiet=QUIET],[tags=TAGS]\n\n"
            "    required arguments:\n        queue=QUEUE (str)\n            queue to submit to\n\n"
            "    optional arguments:\n        quiet=QUIET (bool, False)\n            less output\n"
            "        tags=TAGS (list[str], ['a', 'b'])\n            tags");
}

}  // namespace
}  // namespace trun::specs
