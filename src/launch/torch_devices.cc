#include "launch/torch_devices.h"

#include <fmt/format.h>

#include <cstdlib>

#include "common/strings.h"
#include "proc/command.h"

namespace trun::launch {
namespace {

// Works with torch 1.13 (no torch.xpu, no torch.accelerator) and 2.x. The
// probes mirror torch/distributed/run.py's determine_local_world_size.
constexpr const char* kProbe = R"PY(
import sys, torch
def probe(name):
    m = getattr(torch, name, None)
    try:
        ok = bool(m is not None and m.is_available())
        return ok, (m.device_count() if ok else 0)
    except Exception:
        return False, 0
cuda, xpu = probe("cuda"), probe("xpu")
acc = getattr(torch, "accelerator", None)
if acc is not None:
    a = bool(acc.is_available())
    accel = (a, acc.device_count() if a else 0)
else:
    accel = cuda if cuda[0] else xpu
print("cuda", int(cuda[0]), cuda[1])
print("xpu", int(xpu[0]), xpu[1])
print("accelerator", int(accel[0]), accel[1])
# The privateuse1 backend's name (torch_npu renames it "npu") and its device
# module's answers, as determine_local_world_size asks them (torch 2.x).
name = getattr(torch._C, "_get_privateuse1_backend_name", lambda: "")()
if name:
    try:
        from torch.utils.backend_registration import _get_custom_mod_func
        p1 = bool(_get_custom_mod_func("is_available")())
        print("privateuse1", name, int(p1), _get_custom_mod_func("device_count")() if p1 else 0)
    except Exception:
        print("privateuse1", name, 0, 0)
if sys.argv[1:] == ["pci"] and accel[0]:
    # torch/numa/binding.py: the current accelerator's device module.
    if acc is not None:
        mod = torch.get_device_module(acc.current_accelerator())
    else:
        mod = torch.cuda if cuda[0] else torch.xpu
    for i in range(accel[1]):
        p = mod.get_device_properties(i)
        print("pci", "%04x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id))
)PY";

constexpr double kProbeTimeoutS = 120;

}  // namespace

std::string WorkerPython() {
  const char* p = std::getenv("PYTHON_EXEC");
  return p && *p ? p : "python3";
}

Result<TorchDevices> ParseTorchDevices(const std::string& text) {
  TorchDevices d;
  int seen = 0;
  for (const std::string& line : Split(text, '\n')) {
    std::vector<std::string> f = Split(Trim(line), ' ');
    if (f.size() == 2 && f[0] == "pci") {
      d.accelerator_pci_addresses.push_back(f[1]);
      continue;
    }
    if (f.size() == 4 && f[0] == "privateuse1") {
      auto avail = ParseInt(f[2]);
      auto count = ParseInt(f[3]);
      if (avail && count && *count >= 0) {
        d.privateuse1_name = f[1];
        d.privateuse1_available = *avail != 0;
        d.privateuse1_count = static_cast<int>(*count);
      }
      continue;
    }
    if (f.size() != 3) continue;
    auto avail = ParseInt(f[1]);
    auto count = ParseInt(f[2]);
    if (!avail || !count || *count < 0) continue;
    if (f[0] == "cuda") {
      d.cuda_available = *avail != 0, d.cuda_count = static_cast<int>(*count), ++seen;
    } else if (f[0] == "xpu") {
      d.xpu_available = *avail != 0, d.xpu_count = static_cast<int>(*count), ++seen;
    } else if (f[0] == "accelerator") {
      d.accelerator_available = *avail != 0, d.accelerator_count = static_cast<int>(*count), ++seen;
    }
  }
  if (seen != 3) {
    return Status::Internal(
        fmt::format("expected cuda, xpu and accelerator lines, got '{}'", Trim(text)));
  }
  return d;
}

Result<TorchDevices> AskTorchDevices(const std::string& python, bool with_pci_addresses) {
  std::vector<std::string> argv = {python, "-c", kProbe};
  if (with_pci_addresses) argv.emplace_back("pci");
  auto r = proc::RunCommand(argv, kProbeTimeoutS);
  if (!r.ok()) {
    return Status::NotFound(
        fmt::format("cannot run the worker interpreter '{}' to ask torch for its devices: {}; set "
                    "PYTHON_EXEC to a Python with torch",
                    python, r.status().message()));
  }
  if (r->timed_out || r->exit_code != 0) {
    return Status::Internal(fmt::format(
        "the worker interpreter '{}' could not tell torch's devices ({}){}{}; set PYTHON_EXEC to "
        "a Python with torch",
        python,
        r->timed_out ? fmt::format("no answer in {} s", kProbeTimeoutS)
                     : fmt::format("exit {}", r->exit_code),
        Trim(r->err).empty() ? "" : ":\n", Trim(r->err)));
  }
  auto d = ParseTorchDevices(r->out);
  if (!d.ok()) {
    return Status::Internal(fmt::format("the worker interpreter '{}' answered oddly: {}", python,
                                        d.status().message()));
  }
  return d;
}

}  // namespace trun::launch
