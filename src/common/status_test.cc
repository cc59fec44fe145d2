#include "common/status.h"

#include <gtest/gtest.h>

namespace trun {
namespace {

// An HTTP client's error carries its reply's status beside its kind, so that
// a caller tells a 409 from a 422 (both invalid input) by the number.
TEST(StatusTest, HttpStatusTravelsWithTheError) {
  Status conflict = Status::InvalidArgument("POST /x: conflict (409)").WithHttpStatus(409);
  EXPECT_EQ(conflict.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(conflict.http_status(), 409);
  EXPECT_EQ(conflict.message(), "POST /x: conflict (409)");
  Result<int> r = conflict;
  EXPECT_EQ(r.status().http_status(), 409);
  EXPECT_EQ(Status::InvalidArgument("--nproc-per-node: expected a number").http_status(), 0);
  EXPECT_EQ(Status::OK().http_status(), 0);
}

}  // namespace
}  // namespace trun
