#include "launch/config_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace trun::launch {
namespace {

// A worker argument (or a flag) may hold bytes that are not UTF-8, as a
// Latin-1 file name does; the dry run prints them as U+FFFD, not abort.
TEST(ConfigJsonTest, BytesThatAreNotUtf8PrintAsReplacementCharacters) {
  LaunchConfig c;
  c.role = "r\xff";
  c.worker_argv = {"python", "caf\xe9.py"};
  auto j = nlohmann::json::parse(LaunchConfigJson(c));
  EXPECT_EQ(j["role"], "r\xef\xbf\xbd");
  EXPECT_EQ(j["worker_argv"][1], "caf\xef\xbf\xbd.py");
}

}  // namespace
}  // namespace trun::launch
