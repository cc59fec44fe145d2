#include "common/exit_code.h"

#include <gtest/gtest.h>

namespace trun {
namespace {

TEST(ExitCode, OneCodePerKindOfProblem) {
  EXPECT_EQ(ExitCodeFor(Status::OK()), 0);
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::NotFound("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::Unsupported("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::Timeout("x")), 1);
  EXPECT_EQ(ExitCodeFor(Status::IOError("x")), 3);
  EXPECT_EQ(ExitCodeFor(Status::Internal("x")), 3);
  EXPECT_EQ(ExitCodeFor(Status::Unavailable("x")), 4);
  EXPECT_EQ(ExitCodeFor(Status::PermissionDenied("x")), 5);
  EXPECT_EQ(ExitForSignal(15), 143);
}

TEST(ExitCode, EveryLineOfAnErrorIsPrefixed) {
  ::testing::internal::CaptureStderr();
  int code = ReportError(Status::InvalidArgument("first problem\nsecond problem"));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err, "trun: error: first problem\ntrun: error: second problem\n");
}

}  // namespace
}  // namespace trun
