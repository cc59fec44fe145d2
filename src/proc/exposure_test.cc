#include "proc/exposure.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace trun::proc {
namespace {

bool ProcEnvironHolds(const std::string& text) {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return env.find(text) != std::string::npos;
}

// The variable has to be in the block execve copied, which setenv never
// reaches: the "threadsafe" death test runs its statement in a fresh exec
// of this binary, whose environment has it from the start.
TEST(Exposure, ForgetEnvironmentVariableWipesItFromProcEnvironToo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("TRUN_EXPOSURE_TEST", "s3cr3t-value", 1);
  EXPECT_EXIT(
      {
        if (!ProcEnvironHolds("TRUN_EXPOSURE_TEST=s3cr3t-value")) std::_Exit(2);
        if (!ForgetEnvironmentVariable("TRUN_EXPOSURE_TEST")) std::_Exit(3);
        if (std::getenv("TRUN_EXPOSURE_TEST") != nullptr) std::_Exit(4);
        if (ProcEnvironHolds("s3cr3t-value")) std::_Exit(5);
        // Its neighbours are untouched.
        if (std::getenv("PATH") == nullptr && ProcEnvironHolds("PATH=")) std::_Exit(6);
        std::_Exit(ForgetEnvironmentVariable("TRUN_EXPOSURE_TEST") ? 7 : 0);
      },
      ::testing::ExitedWithCode(0), "");
  ::unsetenv("TRUN_EXPOSURE_TEST");
}

TEST(Exposure, MakeUndumpableClearsTheDumpableFlag) {
  EXPECT_EXIT(
      {
        if (!MakeUndumpable().ok()) std::_Exit(2);
        std::_Exit(::prctl(PR_GET_DUMPABLE) == 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace trun::proc
