// --numa-binding's CPU choice on fake sysfs trees: the machines and cases of
// testdata/numa_topologies.json (one socket with hyper-threads and two L3
// caches, with and without GPUs; two sockets of two NUMA nodes each), which
// tests/integration/test_numa_torch.py also runs through torch's own
// torch/numa/binding.py.
#include "launch/numa_binding.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/source_dir_for_tests.h"

namespace trun::launch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::set<int> Cpus(std::string_view list) { return *ParseCpuList(list); }

// A sysfs tree under a fresh temporary directory, removed at the end.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (fs::temp_directory_path() / "trun-sysfs-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  void Write(const std::string& rel, const std::string& text) {
    fs::path p = root_ + rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  // The machine as the JSON describes it: NUMA nodes, each CPU's core
  // siblings, socket and caches (L1 data and instruction, L2, the given L3),
  // each GPU's PCI device and its numa_node.
  void Build(const json& m) {
    Write("/devices/system/node/possible", m["possible"]);
    for (const auto& [node, list] : m["nodes"].items()) {
      Write("/devices/system/node/node" + node + "/cpulist", list);
    }
    for (const auto& c : m["cpus"]) {
      const std::string base = fmt::format("/devices/system/cpu/cpu{}", c["cpu"].get<int>());
      const std::string siblings = c["siblings"];
      Write(base + "/topology/thread_siblings_list", siblings);
      Write(base + "/topology/physical_package_id", std::to_string(c["socket"].get<int>()));
      const char* types[] = {"Data", "Instruction", "Unified", "Unified"};
      const int levels[] = {1, 1, 2, 3};
      for (int i = 0; i < 4; ++i) {
        const std::string idx = fmt::format("{}/cache/index{}", base, i);
        Write(idx + "/type", types[i]);
        Write(idx + "/level", std::to_string(levels[i]));
        Write(idx + "/shared_cpu_list", i == 3 ? c["l3"].get<std::string>() : siblings);
      }
    }
    for (const auto& g : m["gpus"]) {
      Write("/bus/pci/devices/" + g["pci"].get<std::string>() + "/numa_node",
            std::to_string(g["node"].get<int>()));
    }
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

json Topologies() {
  std::ifstream f(SourceDirForTests() / "src/launch/testdata/numa_topologies.json");
  return json::parse(f);
}

TEST(NumaBindingTest, EveryCaseOfTheFakeMachines) {
  const json doc = Topologies();
  std::map<std::string, std::unique_ptr<FakeSysfs>> trees;
  for (const auto& [name, m] : doc["machines"].items()) {
    trees[name] = std::make_unique<FakeSysfs>();
    trees[name]->Build(m);
  }
  ASSERT_GE(doc["cases"].size(), 30u);
  for (const auto& c : doc["cases"]) {
    const std::string machine = c["machine"];
    NumaTopologyInputs in;
    in.sysfs_root = trees.at(machine)->root();
    for (const auto& g : doc["machines"][machine]["gpus"]) in.gpu_pci_addresses.push_back(g["pci"]);
    in.allowed_cpus = Cpus(c["allowed"].get<std::string>());
    auto mode = ParseNumaMode(c["mode"].get<std::string>());
    ASSERT_TRUE(mode.has_value()) << c.dump();
    auto cpus = NumaCpusForGpu(*mode, c["gpu"].get<int>(), in);
    if (c.contains("error")) {
      ASSERT_FALSE(cpus.ok()) << c.dump() << " gave " << FormatCpuList(*cpus);
      EXPECT_NE(cpus.status().message().find(c["error"].get<std::string>()), std::string::npos)
          << c.dump() << ": " << cpus.status().message();
    } else {
      ASSERT_TRUE(cpus.ok()) << c.dump() << ": " << cpus.status().message();
      EXPECT_EQ(FormatCpuList(*cpus), FormatCpuList(Cpus(c["cpus"].get<std::string>())))
          << c.dump();
    }
  }
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
