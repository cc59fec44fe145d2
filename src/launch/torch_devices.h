// What torch sees in the worker interpreter: the accelerator counts behind
// --nproc-per-node gpu|xpu|auto and the privateuse1 backend's name, and the accelerator devices'
// PCI addresses behind --numa-binding. trun asks the interpreter the workers will run (PYTHON_EXEC,
// else python3) with one short `python -c`, only when one of those is
// requested, so CUDA_VISIBLE_DEVICES, MIG and every other rule of torch's
// count apply exactly as in torchrun, which counts in its own interpreter.
//
// Thread-safety: runs a child process and waits for it; call from one thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace trun::launch {

struct TorchDevices {
  bool cuda_available = false;
  int cuda_count = 0;
  bool xpu_available = false;
  int xpu_count = 0;
  // torch.accelerator (2.6+); before it, CUDA, else XPU.
  bool accelerator_available = false;
  int accelerator_count = 0;
  // The privateuse1 backend (torch 2.x): its name ("privateuseone" unless a
  // plug-in such as torch_npu renames it; empty before torch knew it) and
  // its device module's answers (not available when no module registered).
  std::string privateuse1_name;
  bool privateuse1_available = false;
  int privateuse1_count = 0;
  // The accelerator's devices' PCI addresses ("0000:1b:00.0", from
  // get_device_properties), by device index; filled when asked for.
  std::vector<std::string> accelerator_pci_addresses;
};

// The interpreter's answer; an error names the interpreter and what it
// printed when it cannot import torch or fails.
Result<TorchDevices> AskTorchDevices(const std::string& python, bool with_pci_addresses);

// The interpreter's printed answer, one "key value..." line each.
Result<TorchDevices> ParseTorchDevices(const std::string& text);

// The interpreter workers run: $PYTHON_EXEC, else python3.
std::string WorkerPython();

}  // namespace trun::launch
