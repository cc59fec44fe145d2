#include "net/libcurl.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace trun::net {
namespace {

TEST(LibcurlTest, LoadsOnceAndAnswersTheSameEveryTime) {
  auto maps = [] {
    std::ifstream in("/proc/self/maps");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto first = Libcurl();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_NE(maps().find("libcurl.so.4"), std::string::npos);
  auto again = Libcurl();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  EXPECT_STREQ((*first)->easy_strerror(CURLE_OK), "No error");
}

}  // namespace
}  // namespace trun::net
