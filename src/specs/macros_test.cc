#include "specs/macros.h"

#include <gtest/gtest.h>

namespace trun::specs {
namespace {

TEST(SafeSubstituteTest, PythonTemplateRules) {
  std::map<std::string, std::string> v = {{"app_id", "a1"}, {"x", "X"}};
  EXPECT_EQ(SafeSubstitute("${app_id}-$app_id", v), "a1-a1");
  EXPECT_EQ(SafeSubstitute("$x_y ${x}_y $x.y", v), "$x_y X_y X.y");
  EXPECT_EQ(SafeSubstitute("$$x $${x} $$$x", v), "$x ${x} $X");
  EXPECT_EQ(SafeSubstitute("$unknown ${unknown} $ ${ $1 ${x", v),
            "$unknown ${unknown} $ ${ $1 ${x");
  EXPECT_EQ(SafeSubstitute("end$", v), "end$");
}

TEST(MacroValuesTest, SubstitutesArgsEnvAndMetadataOnly) {
  Role r;
  r.name = "${app_id}";
  r.image = "${img_root}";
  r.entrypoint = "${img_root}/bin";
  r.args = {"--id", "${app_id}", "--replica=${replica_id}", "$${${rank0_env}:=localhost}"};
  r.env = {{"ROOT", "${img_root}/data"}};
  r.metadata = {{"a", "${app_id}"}, {"nested", {{"b", {"${replica_id}", 3}}}}};
  MacroValues v{"/img", "app-1", "2", "TORCHX_RANK0_HOST"};
  Role out = v.Apply(r);
  EXPECT_EQ(out.args, (std::vector<std::string>{"--id", "app-1", "--replica=2",
                                                "${TORCHX_RANK0_HOST:=localhost}"}));
  EXPECT_EQ(out.env.at("ROOT"), "/img/data");
  EXPECT_EQ(out.metadata["a"], "app-1");
  EXPECT_EQ(out.metadata["nested"]["b"][0], "2");
  EXPECT_EQ(out.metadata["nested"]["b"][1], 3);
  // Not substituted, as in TorchX.
  EXPECT_EQ(out.name, "${app_id}");
  EXPECT_EQ(out.image, "${img_root}");
  EXPECT_EQ(out.entrypoint, "${img_root}/bin");
  // The input is untouched.
  EXPECT_EQ(r.args[1], "${app_id}");
}

}  // namespace
}  // namespace trun::specs
