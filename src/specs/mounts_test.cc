#include "specs/mounts.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/strings.h"

namespace trun::specs {
namespace {

std::vector<Mount> Parse(const std::string& s) {
  auto m = ParseMounts(Split(s, ','));
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : std::vector<Mount>{};
}

TEST(MountsTest, ParsesEveryTypeAndAlias) {
  setenv("HOME", "/home/u", 1);
  auto m = Parse(
      "type=bind,src=~/data,dst=/data,readonly,type=volume,source=vol,target=/v,"
      "type=device,src=/dev/fuse,type=device,source=/dev/a,destination=/dev/b,perm=rw,"
      "type=bind,src=/x,dst=/y,read_only");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], (Mount{MountType::kBind, "/home/u/data", "/data", true, "rwm"}));
  EXPECT_EQ(m[1], (Mount{MountType::kVolume, "vol", "/v", false, "rwm"}));
  EXPECT_EQ(m[2], (Mount{MountType::kDevice, "/dev/fuse", "/dev/fuse", false, "rwm"}));
  EXPECT_EQ(m[3], (Mount{MountType::kDevice, "/dev/a", "/dev/b", false, "rw"}));
  EXPECT_TRUE(m[4].read_only);
  EXPECT_EQ(FormatMount(m[0]), "type=bind,src=/home/u/data,dst=/data,readonly");
  EXPECT_EQ(FormatMount(m[3]), "type=device,src=/dev/a,dst=/dev/b,perm=rw");
}

TEST(MountsTest, ReportsEveryMistake) {
  auto m =
      ParseMounts(Split("src=/a,type=nfs,src=/b,dst=/c,type=bind,dts=/x,"
                        "type=device,src=/dev/x,perm=rwx,type=volume,src=v",
                        ','));
  ASSERT_FALSE(m.ok());
  const std::string& e = m.status().message();
  for (const char* needle : {"comes before any type=", "invalid mount type 'nfs'",
                             "unknown option 'dts' (did you mean 'dst'?)", "perm 'rwx'",
                             "a volume mount needs src= and dst="}) {
    EXPECT_NE(e.find(needle), std::string::npos) << needle << "\n" << e;
  }
}

}  // namespace
}  // namespace trun::specs
