// Device discovery for the CUDA backend.
#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include <string>

namespace deltacheck::kernels::cuda {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(err) + ": " +
                          cudaGetErrorString(err));
}

Status cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // the failed query must not surface in the next launch check
    return Status::Unsupported(std::string("no CUDA device: ") + cudaGetErrorName(err) + ": " +
                               cudaGetErrorString(err));
  }
  if (count == 0) return Status::Unsupported("no CUDA device: cudaGetDeviceCount returned 0");
  return Status::Ok();
}

Status opt_in_shared_memory(const void* kernel, int64_t bytes, const std::string& what) {
  int device = 0, limit = 0;
  if (Status st = cuda_status(cudaGetDevice(&device), "cudaGetDevice"); !st.ok()) return st;
  if (Status st = cuda_status(
          cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
      !st.ok())
    return st;
  if (bytes > limit) {
    return Status::Unsupported(what + ": needs " + std::to_string(bytes) +
                               " bytes of shared memory per block, the device allows " +
                               std::to_string(limit));
  }
  return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)),
                     "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

DeviceInfo current_device_info() {
  DeviceInfo info;
  if (info.status = cuda_device_available(); !info.status.ok()) return info;
  int device = 0;
  if (info.status = cuda_status(cudaGetDevice(&device), "cudaGetDevice"); !info.status.ok())
    return info;
  cudaDeviceProp prop{};
  if (info.status = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      !info.status.ok())
    return info;
  info.device = device;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_capability_major = prop.major;
  info.compute_capability_minor = prop.minor;
  info.shared_memory_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.global_memory = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

}  // namespace deltacheck::kernels::cuda
