// Host side of the CUDA backward of the gated delta rule: checks, workspace, launch configuration,
// dtype dispatch. The device code is gated_delta_rule_backward_math.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"
#include "kernels/cuda/gated_delta_rule_backward.h"
#include "kernels/cuda/gated_delta_rule_backward_math.h"

namespace deltacheck::kernels::cuda {
namespace {

using gdr_bwd::Args;

// The CTA's side of Exec (gated_delta_rule_backward_math.h): the calling thread runs the phase,
// then the CTA meets at a barrier. The thread's registers live here.
struct DeviceExec {
  gdr_bwd::Regs regs;
  template <typename F>
  __host__ __device__ void each(F&& f) {
#ifdef __CUDA_ARCH__
    f(static_cast<int>(threadIdx.x), regs);
    __syncthreads();
#endif
  }
};

template <typename T>
__global__ void __launch_bounds__(gdr_bwd::kThreads) backward_kernel(Args a) {
  float* smem = reinterpret_cast<float*>(dynamic_shared_memory());
  const gdr_bwd::Smem s = gdr_bwd::carve(smem, a.key_dim);
  float* states = a.block_states + blockIdx.x * gdr_bwd::block_state_floats(a.key_dim, a.block_len);
  DeviceExec ex;
  for (int64_t item = blockIdx.x; item < a.num_items; item += gridDim.x)
    gdr_bwd::backward_item<T>(ex, a, item, s, states);
}

template <typename T>
__global__ void __launch_bounds__(gdr_bwd::kThreads) reduce_kernel(Args a, int64_t items) {
  float* smem = reinterpret_cast<float*>(dynamic_shared_memory());
  DeviceExec ex;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x)
    gdr_bwd::reduce_token<T>(ex, a, item, smem);
}

// Opts the kernel into `bytes` of dynamic shared memory (Unsupported past the device's limit) and
// returns how many of its CTAs the device runs at once.
Status prepare(const void* kernel, int64_t bytes, int64_t* resident) {
  if (Status st = opt_in_shared_memory(kernel, bytes, "gated delta rule backward"); !st.ok())
    return st;
  int device = 0, sms = 0, per_sm = 0;
  if (Status st = cuda_status(cudaGetDevice(&device), "cudaGetDevice"); !st.ok()) return st;
  if (Status st = cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                              "cudaDeviceGetAttribute(MultiProcessorCount)");
      !st.ok())
    return st;
  if (Status st = cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                  &per_sm, kernel, gdr_bwd::kThreads, static_cast<size_t>(bytes)),
                              "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      !st.ok())
    return st;
  *resident = std::max<int64_t>(1, static_cast<int64_t>(per_sm) * sms);
  return Status::Ok();
}

template <typename T>
Status launch(Args a, cudaStream_t stream) {
  const int64_t smem = gdr_bwd::smem_floats(a.key_dim) * static_cast<int64_t>(sizeof(float));
  const int64_t reduce_smem = gdr_bwd::reduce_smem_floats() * static_cast<int64_t>(sizeof(float));
  int64_t resident = 0, unused = 0;
  if (Status st = prepare(reinterpret_cast<const void*>(&backward_kernel<T>), smem, &resident);
      !st.ok())
    return st;
  if (Status st = prepare(reinterpret_cast<const void*>(&reduce_kernel<T>), reduce_smem, &unused);
      !st.ok())
    return st;
  // Items beyond the resident CTAs wait anyway: a CTA loops over items, with one block of
  // replayed states each, which bounds the workspace by the device instead of the problem.
  const int64_t ctas = std::max<int64_t>(1, std::min(a.num_items, resident));
  const int64_t bytes = gdr_bwd::carve_workspace(a, ctas, nullptr);
  void* workspace = nullptr;
  if (Status st = cuda_status(
          cudaMallocAsync(&workspace, static_cast<size_t>(bytes), stream),
          ("cudaMallocAsync of the backward's workspace (" + std::to_string(bytes) + " bytes)")
              .c_str());
      !st.ok())
    return st;
  gdr_bwd::carve_workspace(a, ctas, static_cast<char*>(workspace));
  Status st = cuda_status(cudaMemsetAsync(a.live, 0, static_cast<size_t>(a.num_tokens), stream),
                          "cudaMemsetAsync of the live flags");
  if (st.ok() && a.num_items > 0) {
    backward_kernel<T>
        <<<static_cast<unsigned>(ctas), gdr_bwd::kThreads, static_cast<size_t>(smem), stream>>>(a);
    st = cuda_status(cudaGetLastError(), "launch of the gated delta rule backward");
  }
  const int64_t reduce_items = a.num_tokens * a.num_heads;
  if (st.ok() && reduce_items > 0) {
    const int64_t grid = std::min<int64_t>(reduce_items, std::numeric_limits<int32_t>::max());
    reduce_kernel<T><<<static_cast<unsigned>(grid), gdr_bwd::kThreads,
                       static_cast<size_t>(reduce_smem), stream>>>(a, reduce_items);
    st = cuda_status(cudaGetLastError(), "launch of the gated delta rule backward's reduction");
  }
  // Stream-ordered: freed once the queued kernels are done with it.
  const Status freed = cuda_status(cudaFreeAsync(workspace, stream), "cudaFreeAsync");
  return st.ok() ? freed : st;
}

}  // namespace

Status gated_delta_rule_backward_can_implement(const GatedDeltaRuleBackwardParams& p) {
  if (!p.d_output || !p.dq || !p.dk || !p.dv || !p.dg || !p.dbeta)
    return Status::InvalidArgument("d_output, dq, dk, dv, dg and dbeta are required");
  GatedDeltaRuleParams f = p.forward;
  f.o = p.dq;  // the forward's output is not written by the backward
  return gated_delta_rule_can_implement(f);
}

int64_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaRuleBackwardParams& p,
                                                  int64_t ctas) {
  Args a = gdr_bwd::make_args(p);
  return gdr_bwd::carve_workspace(a, ctas, nullptr);
}

Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p,
                                           cudaStream_t stream) {
  if (Status st = gated_delta_rule_backward_can_implement(p); !st.ok()) return st;
  GatedDeltaRuleParams f = p.forward;
  f.o = p.dq;
  if (Status st = validate_sequence_layout(f, stream, /*allow_tail=*/true); !st.ok()) return st;
  const Args a = gdr_bwd::make_args(p);
  if (a.num_tokens == 0 && a.num_items == 0) return Status::Ok();
  switch (p.forward.dtype) {
    case DType::kF32:
      return launch<float>(a, stream);
    case DType::kBF16:
      return launch<gdr_bwd::Bf16>(a, stream);
    case DType::kF16:
      return launch<gdr_bwd::F16>(a, stream);
    default:
      break;
  }
  return Status::Unsupported(std::string("gated delta rule backward: dtype ") +
                             dtype_name(p.forward.dtype) + " (supported: fp32, bf16, fp16)");
}

}  // namespace deltacheck::kernels::cuda
