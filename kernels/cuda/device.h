// The CUDA device the kernels run on: whether there is one, what it is, and how a CUDA error
// becomes a Status. Plain C++ (no device code), so tests and the harness can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/status.h"

namespace deltacheck::kernels::cuda {

// Ok when at least one CUDA device can be used; Unsupported("no CUDA device: ...") otherwise
// (no driver, no device, or cudaGetDeviceCount failing for any other reason).
Status cuda_device_available();

struct DeviceInfo {
  Status status;  // not ok: the fields below are unset
  int device = -1;
  std::string name;
  int sm_count = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int64_t shared_memory_per_block_optin = 0;  // bytes a kernel may request after opting in
  int64_t global_memory = 0;                  // bytes
};

// The current device of the calling thread.
DeviceInfo current_device_info();

// Ok for cudaSuccess, otherwise Internal("<what>: <error name>: <error string>").
Status cuda_status(cudaError_t err, const char* what);

// Lets `kernel` (a __global__ function's address) take `bytes` of dynamic shared memory on the
// current device: Unsupported ("<what>: needs N bytes of shared memory per block, the device
// allows M") past the device's opt-in limit. Every CUDA call checked.
Status opt_in_shared_memory(const void* kernel, int64_t bytes, const std::string& what);

}  // namespace deltacheck::kernels::cuda
