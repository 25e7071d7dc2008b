// CPU depthwise causal conv1d (the short convolution of the linear-attention layer) on the raw
// buffers of kernels/common/causal_conv1d_params.h: fp32 accumulation, conv states fp32 in a pool
// addressed through per-sequence slot indices.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/common/causal_conv1d_params.h"

namespace deltacheck::kernels::cpu {

// Prefill, packed (cu_seqlens) or batched.
Status causal_conv1d(const CausalConv1dParams& p);

// One decode step, in place on the conv-state pool.
Status causal_conv1d_update(const CausalConv1dUpdateParams& p);

}  // namespace deltacheck::kernels::cpu
