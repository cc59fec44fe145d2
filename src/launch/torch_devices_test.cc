#include "launch/torch_devices.h"

#include <gtest/gtest.h>

namespace trun::launch {
namespace {

TEST(TorchDevicesTest, ReadsTheInterpretersAnswer) {
  auto d =
      ParseTorchDevices("cuda 1 2\nxpu 0 0\naccelerator 1 2\npci 0000:1b:00.0\npci 0000:1c:00.0\n");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->cuda_available);
  EXPECT_EQ(d->cuda_count, 2);
  EXPECT_FALSE(d->xpu_available);
  EXPECT_EQ(d->accelerator_count, 2);
  EXPECT_EQ(d->accelerator_pci_addresses,
            (std::vector<std::string>{"0000:1b:00.0", "0000:1c:00.0"}));
}

// What a worker script or sitecustomize prints before the answer is no part
// of it; an answer without all three counts is an error.
TEST(TorchDevicesTest, OtherLinesAreIgnoredAndMissingCountsAreErrors) {
  auto d = ParseTorchDevices("hello from sitecustomize\ncuda 0 0\nxpu 1 3\naccelerator 1 3\n");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->xpu_count, 3);
  EXPECT_FALSE(ParseTorchDevices("cuda 1 2\n").ok());
  EXPECT_FALSE(ParseTorchDevices("").ok());
}

TEST(TorchDevicesTest, ReadsThePrivateuse1Backend) {
  auto d = ParseTorchDevices("cuda 0 0\nxpu 0 0\naccelerator 1 8\nprivateuse1 npu 1 8\n");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->privateuse1_name, "npu");
  EXPECT_TRUE(d->privateuse1_available);
  EXPECT_EQ(d->privateuse1_count, 8);
  // torch 1.13 knows no privateuse1 name.
  d = ParseTorchDevices("cuda 0 0\nxpu 0 0\naccelerator 0 0\n");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->privateuse1_name, "");
}

TEST(TorchDevicesTest, AnInterpreterThatCannotRunIsNamed) {
  auto d = AskTorchDevices("/nonexistent/python3", false);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("/nonexistent/python3"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace trun::launch
