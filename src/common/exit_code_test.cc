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
  EXPECT_EQ(ExitCodeFor(Status::UnknownApp("x")), 2);
  EXPECT_EQ(ExitForSignal(15), 143);
}

TEST(ExitCode, EveryLineOfAnErrorIsPrefixed) {
  ::testing::internal::CaptureStderr();
  int code = ReportError(Status::InvalidArgument("first problem\nsecond problem"));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err, "trun: error: first problem\ntrun: error: second problem\n");
}

TEST(ExitCode, TheErrorReportNamesTheKind) {
  // An unknown app exits 2 like any bad input; only its kind tells it apart.
  EXPECT_EQ(ErrorJson(Status::UnknownApp("no local app 'x'")),
            R"({"exit_code":2,"kind":"unknown_app","message":"no local app 'x'"})");
  EXPECT_EQ(ErrorJson(Status::InvalidArgument("bad\nworse")),
            R"({"exit_code":2,"kind":"invalid_argument","message":"bad\nworse"})");
  EXPECT_STREQ(ErrorKindName(StatusCode::kPermissionDenied), "permission_denied");
}

}  // namespace
}  // namespace trun
