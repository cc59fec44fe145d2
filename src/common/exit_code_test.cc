#include "common/exit_code.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/files.h"

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

TEST(ExitCode, TheErrorReportGoesWhereTheCallerSaidAndNoFurther) {
  const std::string path = ::testing::TempDir() + "/exit_code_report.json";
  std::remove(path.c_str());
  ::setenv("TRUN_ERROR_JSON", path.c_str(), 1);
  TakeErrorReportPath();
  // Taken out of the environment: no process trun starts inherits it.
  EXPECT_EQ(std::getenv("TRUN_ERROR_JSON"), nullptr);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ReportError(Status::UnknownApp("no local app 'x'")), 2);
  (void)::testing::internal::GetCapturedStderr();
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, ErrorJson(Status::UnknownApp("no local app 'x'")) + "\n");
  std::remove(path.c_str());
  TakeErrorReportPath();  // unset now: the reports stop
}

}  // namespace
}  // namespace trun
