#include "specs/named_resources.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "common/strings.h"
#include "specs/serialize.h"

namespace trun::specs {
namespace {

constexpr int kGiB = 1024;
// AWS Batch and ECS keep 4 % of an instance's memory: int(1024 * 0.96).
constexpr int kAwsMbPerGiB = 983;
constexpr const char* kInstanceType = "node.kubernetes.io/instance-type";
constexpr const char* kEfa = "vpc.amazonaws.com/efa";
constexpr const char* kNeuron = "aws.amazon.com/neurondevice";

struct Generic {
  const char* name;
  int cpu, gpu, mem_mb;
};

constexpr Generic kGeneric[] = {
    {"gpu.small", 8, 1, 32 * kGiB},   {"gpu.medium", 16, 2, 64 * kGiB},
    {"gpu.large", 32, 4, 128 * kGiB}, {"gpu.xlarge", 64, 8, 256 * kGiB},
    {"cpu.nano", 1, 0, 512},          {"cpu.micro", 1, 0, 1 * kGiB},
    {"cpu.small", 1, 0, 2 * kGiB},    {"cpu.medium", 2, 0, 4 * kGiB},
    {"cpu.large", 2, 0, 8 * kGiB},    {"cpu.xlarge", 8, 0, 32 * kGiB},
};

struct Aws {
  const char* type;  // the instance type; the resource is "aws_" + type
  int cpu, gpu, gib, efa, neuron;
};

constexpr Aws kAws[] = {
    {"t3.medium", 2, 0, 4, 0, 0},
    {"m5.large", 2, 0, 8, 0, 0},
    {"m5.xlarge", 4, 0, 16, 0, 0},
    {"m5.2xlarge", 8, 0, 32, 0, 0},
    {"m5.4xlarge", 16, 0, 64, 0, 0},
    {"m5.8xlarge", 32, 0, 128, 0, 0},
    {"m5.12xlarge", 48, 0, 192, 0, 0},
    {"m5.16xlarge", 64, 0, 256, 0, 0},
    {"m5.24xlarge", 96, 0, 384, 0, 0},
    {"m5.metal", 96, 0, 384, 0, 0},
    {"m5d.large", 2, 0, 8, 0, 0},
    {"m5d.xlarge", 4, 0, 16, 0, 0},
    {"m5d.2xlarge", 8, 0, 32, 0, 0},
    {"m5d.4xlarge", 16, 0, 64, 0, 0},
    {"m5d.8xlarge", 32, 0, 128, 0, 0},
    {"m5d.12xlarge", 48, 0, 192, 0, 0},
    {"m5d.16xlarge", 64, 0, 256, 0, 0},
    {"m5d.24xlarge", 96, 0, 384, 0, 0},
    {"m5d.metal", 96, 0, 384, 0, 0},
    {"c5.18xlarge", 72, 0, 142, 0, 0},
    {"p3.2xlarge", 8, 1, 61, 0, 0},
    {"p3.8xlarge", 32, 4, 244, 0, 0},
    {"p3.16xlarge", 64, 8, 488, 0, 0},
    {"p3dn.24xlarge", 96, 8, 768, 1, 0},
    {"p4d.24xlarge", 96, 8, 1152, 4, 0},
    {"p4de.24xlarge", 96, 8, 1152, 4, 0},
    {"p5.48xlarge", 192, 8, 2048, 32, 0},
    {"p5e.48xlarge", 192, 8, 2048, 32, 0},
    {"p5en.48xlarge", 192, 8, 2048, 16, 0},
    {"p6-b200.48xlarge", 192, 8, 2048, 8, 0},
    {"p6-b300.48xlarge", 192, 8, 4096, 16, 0},
    {"p6e-gb200.36xlarge", 144, 4, 960, 16, 0},
    {"g4dn.xlarge", 4, 1, 16, 0, 0},
    {"g4dn.2xlarge", 8, 1, 32, 0, 0},
    {"g4dn.4xlarge", 16, 1, 64, 0, 0},
    {"g4dn.8xlarge", 32, 1, 128, 1, 0},
    {"g4dn.16xlarge", 64, 1, 256, 1, 0},
    {"g4dn.12xlarge", 48, 4, 192, 1, 0},
    {"g4dn.metal", 96, 8, 384, 1, 0},
    {"g5.xlarge", 4, 1, 16, 0, 0},
    {"g5.2xlarge", 8, 1, 32, 0, 0},
    {"g5.4xlarge", 16, 1, 64, 0, 0},
    {"g5.8xlarge", 32, 1, 128, 1, 0},
    {"g5.16xlarge", 64, 1, 256, 1, 0},
    {"g5.12xlarge", 48, 4, 192, 1, 0},
    {"g5.24xlarge", 96, 4, 384, 1, 0},
    {"g5.48xlarge", 192, 8, 768, 1, 0},
    {"g6e.xlarge", 4, 1, 32, 0, 0},
    {"g6e.2xlarge", 8, 1, 64, 0, 0},
    {"g6e.4xlarge", 16, 1, 128, 0, 0},
    {"g6e.8xlarge", 32, 1, 256, 0, 0},
    {"g6e.16xlarge", 64, 1, 512, 0, 0},
    {"g6e.12xlarge", 48, 4, 384, 0, 0},
    {"g6e.24xlarge", 96, 4, 768, 2, 0},
    {"g6e.48xlarge", 192, 8, 1536, 4, 0},
    {"trn1.2xlarge", 8, 0, 32, 0, 1},
    {"trn1.32xlarge", 128, 0, 512, 8, 16},
    {"inf2.xlarge", 4, 0, 16, 0, 1},
    {"inf2.8xlarge", 32, 0, 128, 0, 1},
    {"inf2.24xlarge", 96, 0, 384, 0, 6},
    {"inf2.48xlarge", 192, 0, 768, 0, 12},
};

std::map<std::string, Resource> Builtins() {
  std::map<std::string, Resource> out;
  out["NULL"] = Resource{};
  out["MISSING"] = Resource{};
  for (const auto& g : kGeneric) {
    Resource r;
    r.cpu = g.cpu;
    r.gpu = g.gpu;
    r.mem_mb = g.mem_mb;
    out[g.name] = r;
  }
  for (const auto& a : kAws) {
    Resource r;
    r.cpu = a.cpu;
    r.gpu = a.gpu;
    r.mem_mb = a.gib * kAwsMbPerGiB;
    r.capabilities[kInstanceType] = a.type;
    if (a.efa) r.devices[kEfa] = a.efa;
    if (a.neuron) r.devices[kNeuron] = a.neuron;
    out[std::string("aws_") + a.type] = r;
  }
  return out;
}

// Builtins, then $TRUN_NAMED_RESOURCES's entries over them.
Result<std::map<std::string, Resource>> All() {
  auto all = Builtins();
  const char* path = std::getenv("TRUN_NAMED_RESOURCES");
  if (!path || !*path) return all;
  auto custom = ReadNamedResourcesFile(path);
  if (!custom.ok()) return custom.status();
  for (auto& [name, r] : *custom) all[name] = std::move(r);
  return all;
}

}  // namespace

Result<Resource> NamedResource(const std::string& name) {
  auto all = All();
  if (!all.ok()) return all.status();
  auto it = all->find(name);
  if (it != all->end()) return it->second;
  std::vector<std::string> names;
  for (const auto& [n, r] : *all) names.push_back(n);
  std::string guess = ClosestMatch(name, names);
  return Status::NotFound(
      fmt::format("no named resource '{}'{}; `trun builtins --resources` lists them", name,
                  guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
}

Result<std::vector<std::string>> NamedResourceNames() {
  auto all = All();
  if (!all.ok()) return all.status();
  std::vector<std::string> names;
  for (const auto& [n, r] : *all) names.push_back(n);
  return names;
}

Result<Resource> MakeResource(int cpu, int gpu, int mem_mb, const std::string& h) {
  if (!h.empty()) return NamedResource(h);
  // TorchX's `cpu or 2`, `gpu or 0`, `memMB or 1024`: zero means the default.
  Resource r;
  r.cpu = cpu ? cpu : 2;
  r.gpu = gpu;
  r.mem_mb = mem_mb ? mem_mb : 1024;
  return r;
}

}  // namespace trun::specs
