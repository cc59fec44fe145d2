#include "launch/numa_binding.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <map>

#include "common/files.h"
#include "common/strings.h"
#include "launch/torch_devices.h"

namespace trun::launch {
namespace {

// One topology, read lazily below the sysfs root.
class Topology {
 public:
  explicit Topology(const NumaTopologyInputs& in) : in_(in) {}

  Result<std::string> Read(const std::string& rel) const {
    auto text = ReadFile(in_.sysfs_root + rel);
    if (!text.ok()) {
      return Status::NotFound(fmt::format("cannot read {}{}", in_.sysfs_root, rel));
    }
    return text;
  }

  Result<std::set<int>> ReadList(const std::string& rel) const {
    auto text = Read(rel);
    if (!text.ok()) return text.status();
    return ParseCpuList(*text);
  }

  Result<int> ReadInt(const std::string& rel) const {
    auto text = Read(rel);
    if (!text.ok()) return text.status();
    auto n = ParseInt(Trim(*text));
    if (!n)
      return Status::InvalidArgument(
          fmt::format("{}{} holds '{}', not a number", in_.sysfs_root, rel, Trim(*text)));
    return static_cast<int>(*n);
  }

  int GpuCount() const { return static_cast<int>(in_.gpu_pci_addresses.size()); }

  // torch: the PCI device's numa_node, -1 (one node) counting as 0.
  Result<int> NodeOfGpu(int gpu) const {
    if (GpuCount() == 0) {
      return Status::InvalidArgument(
          "no accelerator available for NUMA binding (torch in the worker interpreter sees "
          "none); drop --numa-binding");
    }
    if (gpu < 0 || gpu >= GpuCount()) {
      return Status::InvalidArgument(fmt::format(
          "local rank {} uses accelerator device {}, but the worker interpreter sees {} "
          "device(s); lower --nproc-per-node or drop --numa-binding",
          gpu, gpu, GpuCount()));
    }
    auto node = ReadInt(fmt::format("/bus/pci/devices/{}/numa_node",
                                    in_.gpu_pci_addresses[static_cast<size_t>(gpu)]));
    if (!node.ok()) return node.status();
    return std::max(*node, 0);
  }

  Result<std::set<int>> AllowedCpusOfNode(int node) const {
    auto cpus = ReadList(fmt::format("/devices/system/node/node{}/cpulist", node));
    if (!cpus.ok()) {
      return Status::NotFound(fmt::format("could not determine the CPUs of NUMA node {} ({})", node,
                                          cpus.status().message()));
    }
    std::set<int> out;
    std::set_intersection(cpus->begin(), cpus->end(), in_.allowed_cpus.begin(),
                          in_.allowed_cpus.end(), std::inserter(out, out.begin()));
    return out;
  }

  // torch takes the socket of the node's lowest allowed CPU.
  Result<int> SocketOfNode(int node) const {
    auto cpus = AllowedCpusOfNode(node);
    if (!cpus.ok()) return cpus.status();
    if (cpus->empty()) {
      return Status::InvalidArgument(
          fmt::format("NUMA node {} has no CPU trun may run on, so its socket is unknown", node));
    }
    return ReadInt(
        fmt::format("/devices/system/cpu/cpu{}/topology/physical_package_id", *cpus->begin()));
  }

  Result<std::set<int>> GpusOnNode(int node) const {
    std::set<int> gpus;
    for (int g = 0; g < GpuCount(); ++g) {
      auto n = NodeOfGpu(g);
      if (!n.ok()) return n.status();
      if (*n == node) gpus.insert(g);
    }
    return gpus;
  }

  // The CPUs that share the highest-level data or unified cache with `cpu`.
  Result<std::set<int>> MaxLevelCacheOf(int cpu) const {
    const std::string dir = fmt::format("/devices/system/cpu/cpu{}/cache", cpu);
    std::vector<int> indices;
    if (DIR* d = opendir((in_.sysfs_root + dir).c_str())) {
      while (dirent* e = readdir(d)) {
        std::string_view name = e->d_name;
        if (!name.starts_with("index")) continue;
        if (auto i = ParseInt(name.substr(5)); i && *i >= 0 && name.size() > 5) {
          indices.push_back(static_cast<int>(*i));
        }
      }
      closedir(d);
    }
    std::sort(indices.begin(), indices.end());
    int max_level = -1;
    std::set<int> shared;
    for (int i : indices) {
      const std::string base = fmt::format("{}/index{}/", dir, i);
      auto type = Read(base + "type");
      if (!type.ok()) return type.status();
      if (Trim(*type) != "Unified" && Trim(*type) != "Data") continue;
      auto level = ReadInt(base + "level");
      if (!level.ok()) return level.status();
      if (*level <= max_level) continue;
      max_level = *level;
      auto list = ReadList(base + "shared_cpu_list");
      if (!list.ok()) return list.status();
      shared = std::move(*list);
    }
    if (shared.empty()) {
      return Status::NotFound(
          fmt::format("{}{} names no data or unified cache of CPU {}", in_.sysfs_root, dir, cpu));
    }
    return shared;
  }

  // The lowest CPU of each group, with the group's allowed CPUs, by key.
  template <typename KeyOf>
  Result<std::map<int, std::set<int>>> GroupBy(const std::set<int>& cpus, KeyOf key_of) const {
    std::map<int, std::set<int>> groups;
    for (int cpu : cpus) {
      Result<std::set<int>> members = key_of(cpu);
      if (!members.ok()) return members.status();
      if (members->empty()) {
        return Status::NotFound(fmt::format("CPU {} belongs to no group", cpu));
      }
      groups[*members->begin()].insert(cpu);
    }
    return groups;
  }

 private:
  const NumaTopologyInputs& in_;
};

Result<std::set<int>> Node(const Topology& t, int gpu) {
  auto node = t.NodeOfGpu(gpu);
  if (!node.ok()) return node.status();
  return t.AllowedCpusOfNode(*node);
}

Result<std::set<int>> Socket(const Topology& t, int gpu) {
  auto node = t.NodeOfGpu(gpu);
  if (!node.ok()) return node.status();
  auto socket = t.SocketOfNode(*node);
  if (!socket.ok()) return socket.status();
  auto possible = t.ReadList("/devices/system/node/possible");
  if (!possible.ok()) return possible.status();
  std::set<int> out;
  for (int n : *possible) {
    auto s = t.SocketOfNode(n);
    if (!s.ok()) return s.status();
    if (*s != *socket) continue;
    auto cpus = t.AllowedCpusOfNode(n);
    if (!cpus.ok()) return cpus.status();
    out.insert(cpus->begin(), cpus->end());
  }
  return out;
}

// The GPU's place among the GPUs of its NUMA node, their count, and the
// node's allowed CPUs.
struct NodeShare {
  int place = 0;
  int gpus = 0;
  int node = 0;
  std::set<int> cpus;
};

Result<NodeShare> ShareOf(const Topology& t, int gpu) {
  NodeShare s;
  auto node = t.NodeOfGpu(gpu);
  if (!node.ok()) return node.status();
  s.node = *node;
  auto gpus = t.GpusOnNode(*node);
  if (!gpus.ok()) return gpus.status();
  s.gpus = static_cast<int>(gpus->size());
  s.place = static_cast<int>(std::distance(gpus->begin(), gpus->find(gpu)));
  auto cpus = t.AllowedCpusOfNode(*node);
  if (!cpus.ok()) return cpus.status();
  s.cpus = std::move(*cpus);
  return s;
}

Result<std::set<int>> Exclusive(const Topology& t, int gpu) {
  auto share = ShareOf(t, gpu);
  if (!share.ok()) return share.status();
  auto cores = t.GroupBy(share->cpus, [&](int cpu) {
    return t.ReadList(fmt::format("/devices/system/cpu/cpu{}/topology/thread_siblings_list", cpu));
  });
  if (!cores.ok()) return cores.status();
  const int n = static_cast<int>(cores->size());
  const int per_gpu = n / share->gpus;
  const int extra = n % share->gpus;
  if (per_gpu < 1) {
    return Status::InvalidArgument(
        fmt::format("NUMA node {} has only {} physical core(s) for its {} GPUs; "
                    "use --numa-binding node",
                    share->node, n, share->gpus));
  }
  const int start = share->place * per_gpu + std::min(share->place, extra);
  const int end = start + per_gpu + (share->place < extra ? 1 : 0);
  std::set<int> out;
  int i = 0;
  for (const auto& [core, cpus] : *cores) {
    if (i >= start && i < end) out.insert(cpus.begin(), cpus.end());
    ++i;
  }
  return out;
}

Result<std::set<int>> CoreComplex(const Topology& t, int gpu) {
  auto share = ShareOf(t, gpu);
  if (!share.ok()) return share.status();
  auto caches = t.GroupBy(share->cpus, [&](int cpu) { return t.MaxLevelCacheOf(cpu); });
  if (!caches.ok()) return caches.status();
  if (caches->empty()) return std::set<int>{};
  std::vector<std::pair<int, std::set<int>>> order(caches->begin(), caches->end());
  // Fullest cache first, then the lowest CPU.
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return order[static_cast<size_t>(share->place) % order.size()].second;
}

}  // namespace

std::optional<NumaMode> ParseNumaMode(std::string_view name) {
  if (name == "node") return NumaMode::kNode;
  if (name == "socket") return NumaMode::kSocket;
  if (name == "exclusive") return NumaMode::kExclusive;
  if (name == "core-complex") return NumaMode::kCoreComplex;
  return std::nullopt;
}

Result<std::set<int>> NumaCpusForGpu(NumaMode mode, int gpu_index, const NumaTopologyInputs& in) {
  Topology t(in);
  Result<std::set<int>> cpus = std::set<int>{};
  switch (mode) {
    case NumaMode::kNode:
      cpus = Node(t, gpu_index);
      break;
    case NumaMode::kSocket:
      cpus = Socket(t, gpu_index);
      break;
    case NumaMode::kExclusive:
      cpus = Exclusive(t, gpu_index);
      break;
    case NumaMode::kCoreComplex:
      cpus = CoreComplex(t, gpu_index);
      break;
  }
  if (cpus.ok() && cpus->empty()) {
    return Status::InvalidArgument(
        fmt::format("no CPU trun may run on is near accelerator device {}; nothing to bind "
                    "to",
                    gpu_index));
  }
  return cpus;
}

Result<std::set<int>> ParseCpuList(std::string_view text) {
  std::set<int> out;
  for (const std::string& item : Split(Trim(text), ',')) {
    std::string_view r = Trim(item);
    if (r.empty()) continue;
    const size_t dash = r.find('-');
    auto lo = ParseInt(r.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : ParseInt(r.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > 1'000'000) {
      return Status::InvalidArgument(fmt::format("'{}' is not a CPU list like 0-3,8", Trim(text)));
    }
    for (long long c = *lo; c <= *hi; ++c) out.insert(static_cast<int>(c));
  }
  return out;
}

std::string FormatCpuList(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    int lo = *it, hi = *it;
    for (++it; it != cpus.end() && *it == hi + 1; ++it) hi = *it;
    if (!out.empty()) out += ',';
    out += lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi);
  }
  return out;
}

std::set<int> AllowedCpus() {
  std::set<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.insert(c);
  }
  return out;
}

Status BindWorkersToNuma(LaunchConfig& config) {
  auto mode = ParseNumaMode(config.numa_binding.value_or(""));
  if (!mode) return Status::OK();
  auto devices = AskTorchDevices(WorkerPython(), true);
  if (!devices.ok()) return devices.status();
  NumaTopologyInputs in;
  in.gpu_pci_addresses = devices->accelerator_pci_addresses;
  in.allowed_cpus = AllowedCpus();
  config.worker_cpus.clear();
  for (int lr = 0; lr < config.nproc_per_node; ++lr) {
    auto cpus = NumaCpusForGpu(*mode, lr, in);
    if (!cpus.ok()) {
      return Status::Internal(
          fmt::format("--numa-binding {}: {}", *config.numa_binding, cpus.status().message()));
    }
    config.worker_cpus.push_back(std::move(*cpus));
  }
  return Status::OK();
}

}  // namespace trun::launch
