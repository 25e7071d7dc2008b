// CUDA kernels for the short causal convolution of the linear-attention layer (docs/semantics.md,
// "Around the rule"): depthwise over the channels, width W, optional bias, optional SiLU, fp32
// accumulation, on raw device buffers (kernels/common/causal_conv1d_params.h, the CPU kernels'
// parameters: every pointer a device pointer, num_threads ignored). The final conv state of a
// sequence is the last W-1 inputs of [initial state, x], so a short sequence keeps part of its
// initial state. All calls are asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/common/causal_conv1d_params.h"

namespace deltacheck::kernels::cuda {

// Whether causal_conv1d can run p (host-side fields only). Sequences whose bounds or slot turn out
// out of range on the device are skipped there (nothing written for them).
Status causal_conv1d_can_implement(const CausalConv1dParams& p);

// Prefill, packed (cu_seqlens) or batched: one thread per (token, channel), then one per
// (sequence, channel) for the final states.
Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream);

// One decode step, in place on the conv-state pool: one thread per (sequence, channel).
Status causal_conv1d_update(const CausalConv1dUpdateParams& p, cudaStream_t stream);

}  // namespace deltacheck::kernels::cuda
