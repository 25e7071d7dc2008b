// Host side of the CUDA causal conv1d: problem checks, launch configuration, dtype dispatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/causal_conv1d.h"
#include "kernels/cuda/causal_conv1d_kernels.cuh"
#include "kernels/cuda/device.h"

namespace deltacheck::kernels::cuda {
namespace {

int64_t sequence_count(const CausalConv1dParams& p) { return p.cu_seqlens ? p.num_seqs : p.batch; }

Status check_width_and_dtype(int64_t width, DType dtype) {
  if (width < 1) return Status::InvalidArgument("width must be >= 1");
  if (width > conv::kMaxWidth) {
    return Status::Unsupported("width " + std::to_string(width) +
                               " > 8: the per-thread window is sized for 8 taps");
  }
  if (!is_kernel_dtype(dtype))
    return Status::Unsupported(std::string("dtype ") + dtype_name(dtype) +
                               " (supported: fp32, bf16, fp16)");
  return Status::Ok();
}

// Enough CTAs to fill any current GPU many times over; the kernels loop beyond that.
unsigned grid_for(int64_t elements) {
  return static_cast<unsigned>(
      std::min<int64_t>(ceil_div(elements, conv::kThreads), int64_t{1} << 20));
}

template <typename T>
Status launch_prefill(const conv::KernelArgs& a, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens > 0) {
    conv::prefill_kernel<T>
        <<<grid_for(num_tokens * a.channels), conv::kThreads, 0, stream>>>(a, num_tokens);
    if (Status st = cuda_status(cudaGetLastError(), "launch of causal_conv1d prefill"); !st.ok())
      return st;
  }
  // Stream order puts the state writes after every read of the initial states above.
  if (a.final_state && a.width > 1) {
    conv::final_state_kernel<T>
        <<<grid_for(a.num_seqs * a.channels), conv::kThreads, 0, stream>>>(a);
    return cuda_status(cudaGetLastError(), "launch of causal_conv1d final states");
  }
  return Status::Ok();
}

template <typename T>
Status launch_update(const conv::UpdateArgs& a, cudaStream_t stream) {
  conv::update_kernel<T><<<grid_for(a.num_seqs * a.channels), conv::kThreads, 0, stream>>>(a);
  return cuda_status(cudaGetLastError(), "launch of causal_conv1d update");
}

}  // namespace

Status causal_conv1d_can_implement(const CausalConv1dParams& p) {
  if (p.batch < 1 || p.seq_len < 0 || p.channels < 1)
    return Status::InvalidArgument("batch and channels must be >= 1, T >= 0");
  if (Status st = check_width_and_dtype(p.width, p.dtype); !st.ok()) return st;
  if (!p.x || !p.weight || !p.out) return Status::InvalidArgument("x, weight and out are required");
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens requires batch == 1");
    if (p.num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
    if (p.num_seqs == 0 && p.seq_len != 0)
      return Status::InvalidArgument("cu_seqlens with no sequence must describe T == 0");
  }
  const int64_t n = sequence_count(p);
  if (!p.state_slots && p.num_state_rows > 0 && p.num_state_rows < n &&
      (p.initial_state || p.final_state)) {
    return Status::InvalidArgument("num_state_rows " + std::to_string(p.num_state_rows) + " < " +
                                   std::to_string(n) + " sequences without state_slots");
  }
  return Status::Ok();
}

Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream) {
  if (Status st = causal_conv1d_can_implement(p); !st.ok()) return st;
  conv::KernelArgs a{};
  a.seq_len = p.seq_len;
  a.channels = p.channels;
  a.width = static_cast<int>(p.width);
  a.x = p.x;
  a.out = p.out;
  a.weight = p.weight;
  a.bias = p.bias;
  a.silu = p.silu;
  a.cu_seqlens = p.cu_seqlens;
  a.num_seqs = sequence_count(p);
  a.initial_state = p.initial_state;
  a.final_state = p.final_state;
  a.state_slots = p.state_slots;
  a.num_state_rows = p.num_state_rows > 0 ? p.num_state_rows : a.num_seqs;
  a.has_initial_state = p.has_initial_state;
  if (a.num_seqs == 0) return Status::Ok();
  const int64_t num_tokens = p.batch * p.seq_len;
  switch (p.dtype) {
    case DType::kF32:
      return launch_prefill<float>(a, num_tokens, stream);
    case DType::kBF16:
      return launch_prefill<__nv_bfloat16>(a, num_tokens, stream);
    case DType::kF16:
      return launch_prefill<__half>(a, num_tokens, stream);
    default:
      break;
  }
  return Status::Unsupported(std::string("dtype ") + dtype_name(p.dtype) +
                             " (supported: fp32, bf16, fp16)");
}

Status causal_conv1d_update(const CausalConv1dUpdateParams& p, cudaStream_t stream) {
  if (p.num_seqs < 0 || p.channels < 1)
    return Status::InvalidArgument("num_seqs must be >= 0, channels >= 1");
  if (Status st = check_width_and_dtype(p.width, p.dtype); !st.ok()) return st;
  if (!p.x || !p.weight || !p.out || (!p.state && p.width > 1))
    return Status::InvalidArgument("x, weight, out and state are required");
  if (!p.state_slots && p.num_state_rows > 0 && p.num_state_rows < p.num_seqs) {
    return Status::InvalidArgument("num_state_rows " + std::to_string(p.num_state_rows) + " < " +
                                   std::to_string(p.num_seqs) + " sequences without state_slots");
  }
  conv::UpdateArgs a{};
  a.num_seqs = p.num_seqs;
  a.channels = p.channels;
  a.width = static_cast<int>(p.width);
  a.x = p.x;
  a.out = p.out;
  a.weight = p.weight;
  a.bias = p.bias;
  a.silu = p.silu;
  a.state = p.state;
  a.state_slots = p.state_slots;
  a.num_state_rows = p.num_state_rows > 0 ? p.num_state_rows : p.num_seqs;
  if (a.num_seqs == 0) return Status::Ok();
  switch (p.dtype) {
    case DType::kF32:
      return launch_update<float>(a, stream);
    case DType::kBF16:
      return launch_update<__nv_bfloat16>(a, stream);
    case DType::kF16:
      return launch_update<__half>(a, stream);
    default:
      break;
  }
  return Status::Unsupported(std::string("dtype ") + dtype_name(p.dtype) +
                             " (supported: fp32, bf16, fp16)");
}

}  // namespace deltacheck::kernels::cuda
