// Named resources ("t-shirt sizes"): `-h gpu.small` instead of cpu, gpu and
// memMB one by one.
//
// Two tables, as TorchX ships them: generic sizes (gpu.small ... cpu.xlarge)
// and AWS instance types (aws_p4d.24xlarge, ...; memory is the instance's
// GiB times 983 MB, TorchX's 4 % allowance for the container runtime, and
// each carries its instance type as the capability
// "node.kubernetes.io/instance-type" and its EFA and Neuron devices).
// `NULL` and `MISSING` name the NULL resource. Where TorchX loads more from a
// Python module ($TORCHX_CUSTOM_NAMED_RESOURCES), trun reads a YAML or JSON
// file named by $TRUN_NAMED_RESOURCES:
//
//   my.host: {cpu: 32, gpu: 4, memMB: 256000, devices: {vpc.amazonaws.com/efa: 1}}
//
// whose entries win over the builtin ones.
//
// Thread-safety: pure functions (the custom file is read on each call).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "specs/app.h"

namespace trun::specs {

// The resource named `name`; NotFound (with a suggestion) when none is.
Result<Resource> NamedResource(const std::string& name);

// Every name, builtin and custom, sorted.
Result<std::vector<std::string>> NamedResourceNames();

// TorchX's specs.resource(cpu, gpu, memMB, h): the named resource when `h`
// is not empty, else the given numbers, where a zero cpu or memMB means
// TorchX's default (2 and 1024).
Result<Resource> MakeResource(int cpu, int gpu, int mem_mb, const std::string& h);

}  // namespace trun::specs
