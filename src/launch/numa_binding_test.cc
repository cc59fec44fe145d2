// --numa-binding's CPU choice on fake sysfs trees: one socket with
// hyper-threads and two L3 caches, two sockets of two NUMA nodes each, and
// machines without GPUs or with too few cores.
#include "launch/numa_binding.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace trun::launch {
namespace {

namespace fs = std::filesystem;

std::set<int> Cpus(std::string_view list) { return *ParseCpuList(list); }

// A sysfs tree under a fresh temporary directory, removed at the end.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (fs::temp_directory_path() / "trun-sysfs-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~FakeSysfs() { fs::remove_all(root_); }

  void Write(const std::string& rel, const std::string& text) {
    fs::path p = root_ + rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  // A CPU: its core's hyper-thread siblings, its socket, and its caches
  // (L1 data, L1 instruction, L2, and an L3 shared by `l3`).
  void Cpu(int cpu, const std::string& siblings, int socket, const std::string& l3) {
    const std::string base = "/devices/system/cpu/cpu" + std::to_string(cpu);
    Write(base + "/topology/thread_siblings_list", siblings);
    Write(base + "/topology/physical_package_id", std::to_string(socket));
    const char* types[] = {"Data", "Instruction", "Unified", "Unified"};
    const int levels[] = {1, 1, 2, 3};
    for (int i = 0; i < 4; ++i) {
      const std::string idx = base + "/cache/index" + std::to_string(i);
      Write(idx + "/type", types[i]);
      Write(idx + "/level", std::to_string(levels[i]));
      Write(idx + "/shared_cpu_list", i == 3 ? l3 : siblings);
    }
  }
  void Node(int node, const std::string& cpulist) {
    Write("/devices/system/node/node" + std::to_string(node) + "/cpulist", cpulist);
  }
  // A GPU at a made-up PCI address on `node`; returns the address.
  std::string Gpu(int bus, int node) {
    std::string addr = fmt::format("0000:{:02x}:00.0", bus);
    Write("/bus/pci/devices/" + addr + "/numa_node", std::to_string(node));
    return addr;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// A fake machine and the inputs trun's binding reads from it.
class NumaTest : public ::testing::Test {
 protected:
  std::set<int> For(NumaMode mode, int gpu) {
    auto cpus = NumaCpusForGpu(mode, gpu, in_);
    EXPECT_TRUE(cpus.ok()) << cpus.status().ToString();
    return cpus.ok() ? *cpus : std::set<int>{};
  }
  FakeSysfs sys_;
  NumaTopologyInputs in_;
};

// One socket, one NUMA node, 4 cores with 2 threads each (CPU c and c+4),
// cores 0-1 and 2-3 sharing an L3 each; two GPUs whose numa_node is -1.
class OneSocket : public NumaTest {
 protected:
  void SetUp() override {
    sys_.Write("/devices/system/node/possible", "0");
    sys_.Node(0, "0-7");
    for (int c = 0; c < 8; ++c) {
      const int core = c % 4;
      sys_.Cpu(c, fmt::format("{},{}", core, core + 4), 0, core < 2 ? "0-1,4-5" : "2-3,6-7");
    }
    in_.sysfs_root = sys_.root();
    in_.gpu_pci_addresses = {sys_.Gpu(0x1b, -1), sys_.Gpu(0x1c, -1)};
    in_.allowed_cpus = Cpus("0-7");
  }
};

TEST_F(OneSocket, NodeAndSocketAreTheWholeMachine) {
  for (int gpu : {0, 1}) {
    EXPECT_EQ(For(NumaMode::kNode, gpu), Cpus("0-7"));
    EXPECT_EQ(For(NumaMode::kSocket, gpu), Cpus("0-7"));
  }
}

TEST_F(OneSocket, ExclusiveSplitsPhysicalCoresWithTheirThreads) {
  EXPECT_EQ(For(NumaMode::kExclusive, 0), Cpus("0-1,4-5"));
  EXPECT_EQ(For(NumaMode::kExclusive, 1), Cpus("2-3,6-7"));
}

TEST_F(OneSocket, CoreComplexGivesEachGpuItsOwnL3) {
  EXPECT_EQ(For(NumaMode::kCoreComplex, 0), Cpus("0-1,4-5"));
  EXPECT_EQ(For(NumaMode::kCoreComplex, 1), Cpus("2-3,6-7"));
  // The fuller cache first: with CPU 1 not allowed, 2-3,6-7 comes first.
  in_.allowed_cpus = Cpus("0,2-7");
  EXPECT_EQ(For(NumaMode::kCoreComplex, 0), Cpus("2-3,6-7"));
  EXPECT_EQ(For(NumaMode::kCoreComplex, 1), Cpus("0,4-5"));
}

TEST_F(OneSocket, OnlyAllowedCpusAreUsed) {
  in_.allowed_cpus = Cpus("1-3");
  EXPECT_EQ(For(NumaMode::kNode, 0), Cpus("1-3"));
  // Three cores left for two GPUs: the lower GPU gets the extra one.
  EXPECT_EQ(For(NumaMode::kExclusive, 0), Cpus("1-2"));
  EXPECT_EQ(For(NumaMode::kExclusive, 1), Cpus("3"));
}

TEST_F(OneSocket, AGpuBeyondTheDeviceCountFails) {
  auto cpus = NumaCpusForGpu(NumaMode::kNode, 2, in_);
  ASSERT_FALSE(cpus.ok());
  EXPECT_NE(cpus.status().message().find("sees 2 device(s)"), std::string::npos)
      << cpus.status().message();
}

TEST_F(OneSocket, NoGpuAtAllFails) {
  in_.gpu_pci_addresses.clear();
  for (NumaMode m :
       {NumaMode::kNode, NumaMode::kSocket, NumaMode::kExclusive, NumaMode::kCoreComplex}) {
    EXPECT_FALSE(NumaCpusForGpu(m, 0, in_).ok());
  }
}

TEST_F(OneSocket, ExclusiveNeedsACorePerGpu) {
  in_.allowed_cpus = Cpus("0,4");  // one physical core
  auto cpus = NumaCpusForGpu(NumaMode::kExclusive, 1, in_);
  ASSERT_FALSE(cpus.ok());
  EXPECT_NE(cpus.status().message().find("only 1 physical core(s) for its 2 GPUs"),
            std::string::npos)
      << cpus.status().message();
}

TEST_F(OneSocket, NoAllowedCpuOnTheNodeFails) {
  in_.allowed_cpus = Cpus("9");
  EXPECT_FALSE(NumaCpusForGpu(NumaMode::kNode, 0, in_).ok());
}

// Two sockets of two NUMA nodes (4 CPUs each, no hyper-threads, an L3 per
// node); GPUs 0 and 1 on node 0, GPU 2 on node 2, GPU 3 on node 3.
class TwoSockets : public NumaTest {
 protected:
  void SetUp() override {
    sys_.Write("/devices/system/node/possible", "0-3");
    for (int node = 0; node < 4; ++node) {
      const std::string list = fmt::format("{}-{}", node * 4, node * 4 + 3);
      sys_.Node(node, list);
      for (int c = node * 4; c < node * 4 + 4; ++c) sys_.Cpu(c, std::to_string(c), node / 2, list);
    }
    in_.sysfs_root = sys_.root();
    in_.gpu_pci_addresses = {sys_.Gpu(0x10, 0), sys_.Gpu(0x11, 0), sys_.Gpu(0x80, 2),
                             sys_.Gpu(0x90, 3)};
    in_.allowed_cpus = Cpus("0-15");
  }
};

TEST_F(TwoSockets, NodeIsTheGpusNumaNode) {
  EXPECT_EQ(For(NumaMode::kNode, 0), Cpus("0-3"));
  EXPECT_EQ(For(NumaMode::kNode, 2), Cpus("8-11"));
  EXPECT_EQ(For(NumaMode::kNode, 3), Cpus("12-15"));
}

TEST_F(TwoSockets, SocketIsEveryNodeOfTheGpusSocket) {
  EXPECT_EQ(For(NumaMode::kSocket, 1), Cpus("0-7"));
  EXPECT_EQ(For(NumaMode::kSocket, 2), Cpus("8-15"));
}

TEST_F(TwoSockets, ExclusiveSharesANodeAmongItsGpus) {
  EXPECT_EQ(For(NumaMode::kExclusive, 0), Cpus("0-1"));
  EXPECT_EQ(For(NumaMode::kExclusive, 1), Cpus("2-3"));
  EXPECT_EQ(For(NumaMode::kExclusive, 3), Cpus("12-15"));
}

TEST_F(TwoSockets, CoreComplexWrapsAroundTheNodesCaches) {
  // Node 0 has one L3 for its two GPUs: both get it.
  EXPECT_EQ(For(NumaMode::kCoreComplex, 0), Cpus("0-3"));
  EXPECT_EQ(For(NumaMode::kCoreComplex, 1), Cpus("0-3"));
}

TEST_F(TwoSockets, SocketNeedsAnAllowedCpuOnEveryNode) {
  // torch takes each node's lowest allowed CPU to find its socket, and fails
  // on a node with none (here node 1, fenced off by the affinity).
  in_.allowed_cpus = Cpus("0-3,8-15");
  EXPECT_FALSE(NumaCpusForGpu(NumaMode::kSocket, 0, in_).ok());
  EXPECT_EQ(For(NumaMode::kNode, 0), Cpus("0-3"));
}

TEST(NumaBindingTest, CpuListsRoundTrip) {
  EXPECT_EQ(Cpus("0-2,4, 6-7\n"), (std::set<int>{0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(FormatCpuList({0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
}

TEST(NumaBindingTest, ModesAreTorchs) {
  EXPECT_EQ(ParseNumaMode("core-complex"), NumaMode::kCoreComplex);
  EXPECT_EQ(ParseNumaMode("exclusive"), NumaMode::kExclusive);
  EXPECT_FALSE(ParseNumaMode("core_complex").has_value());
}

}  // namespace
}  // namespace trun::launch
