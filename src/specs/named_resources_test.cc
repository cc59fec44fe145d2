#include "specs/named_resources.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

namespace trun::specs {
namespace {

TEST(NamedResourcesTest, GenericAndAws) {
  auto small = NamedResource("gpu.small");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->cpu, 8);
  EXPECT_EQ(small->gpu, 1);
  EXPECT_EQ(small->mem_mb, 32768);
  auto p4d = NamedResource("aws_p4d.24xlarge");
  ASSERT_TRUE(p4d.ok());
  EXPECT_EQ(p4d->cpu, 96);
  EXPECT_EQ(p4d->gpu, 8);
  EXPECT_EQ(p4d->mem_mb, 1132416);  // TorchX's, by execution
  EXPECT_EQ(p4d->capabilities["node.kubernetes.io/instance-type"], "p4d.24xlarge");
  EXPECT_EQ(p4d->devices.at("vpc.amazonaws.com/efa"), 4);
  auto trn = NamedResource("aws_trn1.32xlarge");
  ASSERT_TRUE(trn.ok());
  EXPECT_EQ(trn->devices.at("aws.amazon.com/neurondevice"), 16);
  EXPECT_EQ(NamedResource("aws_t3.medium")->mem_mb, 3932);
  EXPECT_TRUE(NamedResource("NULL")->IsNull());
  EXPECT_TRUE(NamedResource("MISSING")->IsNull());
}

TEST(NamedResourcesTest, UnknownNamesGetASuggestion) {
  auto r = NamedResource("gpu.smal");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did you mean 'gpu.small'"), std::string::npos);
}

TEST(NamedResourcesTest, MakeResourceDefaultsAndNames) {
  auto r = MakeResource(0, 0, 0, "");
  EXPECT_EQ(r->cpu, 2);
  EXPECT_EQ(r->gpu, 0);
  EXPECT_EQ(r->mem_mb, 1024);
  EXPECT_EQ(MakeResource(4, 1, 100, "cpu.nano")->mem_mb, 512);
}

TEST(NamedResourcesTest, CustomFileWinsOverBuiltins) {
  std::string path = testing::TempDir() + "/resources.yaml";
  std::ofstream(path) << "gpu.small: {cpu: 4, gpu: 2, memMB: 1000}\n"
                         "my.host:\n  cpu: 32\n  gpu: 4\n  memMB: 256000\n"
                         "  devices: {vpc.amazonaws.com/efa: 1}\n";
  setenv("TRUN_NAMED_RESOURCES", path.c_str(), 1);
  EXPECT_EQ(NamedResource("gpu.small")->gpu, 2);
  auto mine = NamedResource("my.host");
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ(mine->devices.at("vpc.amazonaws.com/efa"), 1);
  std::ofstream(path) << "broken: {cpu: lots}\n";
  auto bad = NamedResource("broken");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.cpu: expected an integer"), std::string::npos)
      << bad.status().message();
  unsetenv("TRUN_NAMED_RESOURCES");
}

}  // namespace
}  // namespace trun::specs
