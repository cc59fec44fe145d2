// --numa-binding: the CPUs each worker is bound to, chosen as torch 2.x's
// torch/numa/binding.py chooses them, from the machine's topology in sysfs.
//
// The worker of local rank R uses accelerator device R (torch.accelerator's:
// CUDA, XPU, ...); its NUMA node is the PCI device's numa_node (-1, a
// one-node machine's answer, counts as node 0).
//   node          every allowed CPU of that NUMA node
//   socket        every allowed CPU of every NUMA node on the node's socket
//                 (physical_package_id of the node's lowest allowed CPU)
//   exclusive     the node's physical cores (thread_siblings_list) split
//                 evenly, in order, among the GPUs on that node; the lowest
//                 GPU indices get one core more when they do not divide
//   core-complex  the node's CPUs grouped by their highest-level data or
//                 unified cache (a core complex, CCX), largest group first,
//                 then lowest CPU; the GPU's place among the node's GPUs,
//                 modulo the group count, picks its group
// "Allowed" is the affinity trun itself runs with (cgroups, taskset).
//
// Everything is read below a sysfs root ("/sys" on a real machine), so tests
// run on fake trees. The devices' PCI addresses come from the worker
// interpreter (torch_devices.h), as torch reads them from the accelerator's
// get_device_properties.
//
// Thread-safety: pure functions over files; safe from any thread.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "launch/config.h"

namespace trun::launch {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex" (torch's AffinityMode values).
std::optional<NumaMode> ParseNumaMode(std::string_view name);

struct NumaTopologyInputs {
  std::string sysfs_root = "/sys";
  // Each accelerator device's PCI address ("0000:dc:00.0"), by device index.
  std::vector<std::string> gpu_pci_addresses;
  // The CPUs this process may run on.
  std::set<int> allowed_cpus;
};

// The CPUs the worker using accelerator device `gpu_index` is bound to. An error
// (a missing GPU or sysfs file, no allowed CPU on a node, fewer physical
// cores than GPUs under exclusive, an empty set) is where torch raises.
Result<std::set<int>> NumaCpusForGpu(NumaMode mode, int gpu_index, const NumaTopologyInputs& in);

// sysfs's list format, "0-3,8,10-11" (torch's _get_set_of_int_from_ranges_str).
Result<std::set<int>> ParseCpuList(std::string_view text);
// The reverse, with ranges: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::set<int>& cpus);

// The CPUs this process may run on (sched_getaffinity).
std::set<int> AllowedCpus();

// Fills config.worker_cpus for config.numa_binding: asks the worker
// interpreter for its accelerator devices, reads /sys, and picks each local rank's
// CPUs. An error is where torchrun's agent fails to start its workers.
Status BindWorkersToNuma(LaunchConfig& config);

}  // namespace trun::launch
