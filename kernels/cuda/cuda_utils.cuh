// Device-side building blocks shared by the CUDA kernels: storage-type conversion, warp and block
// reductions and scans, and the base of the dynamic shared memory.
//
// Every kernel takes all of its shared memory from dynamic_shared_memory() (no static __shared__
// arrays), so the host sizes it in one place and can check it against the device's limit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace deltacheck::kernels::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// Round to nearest even, as core/half.h does on the host.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Floor division for a possibly negative numerator and a positive divisor (Python's //).
__host__ __device__ constexpr int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ unsigned char* dynamic_shared_memory() {
  extern __shared__ __align__(16) unsigned char dc_dynamic_smem[];
  return dc_dynamic_smem;
}

// Sum over the 32 lanes; every lane gets the result.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(kFullWarp, x, offset);
  return x;
}

struct MinOp {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};

// Reduction over the whole block; every thread gets the result. `scratch` holds one entry per
// warp. Must be reached by all threads of the block; scratch is free again on return.
template <typename Op>
__device__ int64_t block_reduce(int64_t x, int64_t* scratch, Op op) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x = op(x, static_cast<int64_t>(__shfl_xor_sync(kFullWarp, static_cast<long long>(x), offset)));
  }
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  int64_t r = scratch[0];
  for (int w = 1; w < num_warps; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

struct ScanResult {
  int64_t inclusive;  // this thread's inclusive prefix sum
  int64_t total;      // sum over the block
};

// Inclusive prefix sum over the block in thread order. Same contract as block_reduce.
__device__ inline ScanResult block_inclusive_scan(int64_t x, int64_t* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const auto y =
        static_cast<int64_t>(__shfl_up_sync(kFullWarp, static_cast<long long>(x), offset));
    if (lane >= offset) x += y;
  }
  if (lane == kWarpSize - 1) scratch[warp] = x;
  __syncthreads();
  int64_t before = 0, total = 0;
  for (int w = 0; w < num_warps; ++w) {
    if (w < warp) before += scratch[w];
    total += scratch[w];
  }
  __syncthreads();
  return {before + x, total};
}

}  // namespace deltacheck::kernels::cuda
