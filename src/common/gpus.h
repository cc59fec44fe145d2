// How many GPUs this process may use, as the NVIDIA driver shows them.
// Below launch/ and schedulers/, which both ask: the agent's flags and the
// local scheduler's auto_set_cuda_visible_devices.
//
// Thread-safety: reads the process's environment and /proc; safe from any
// thread that does not change the environment meanwhile.
#pragma once

namespace trun {

// Number of GPUs this process may use (NVIDIA driver's view, narrowed by
// CUDA_VISIBLE_DEVICES): the local scheduler's auto_set_cuda_visible_devices.
// --nproc-per-node gpu asks torch instead (launch/torch_devices.h).
int CountGpus();

}  // namespace trun
