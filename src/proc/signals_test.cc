#include "proc/signals.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace trun::proc {
namespace {

TEST(SignalsTest, NamesBothWays) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(ParseSignal("SIGTERM"), SIGTERM);
  EXPECT_EQ(ParseSignal("HUP"), SIGHUP);
  EXPECT_EQ(ParseSignal("2"), SIGINT);
  EXPECT_FALSE(ParseSignal("SIGNOPE"));
  EXPECT_FALSE(ParseSignal("0"));
}

}  // namespace
}  // namespace trun::proc
