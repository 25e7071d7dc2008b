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

// Block checkpoints of a prefill (docs/serving.md, cache=ckpt): for every block b of sequence i
// (blocks of block_size tokens), the conv state after the block's last token, or after the
// sequence's last token for the block that holds it (the last W-1 inputs, reaching into the
// sequence's initial state, as final_state has them), into row block_slots[i * max_blocks + b]
// of pool [num_rows, D, W-1]; negative entries are not written. p.out and p.final_state are not
// touched.
Status causal_conv1d_checkpoints(const CausalConv1dParams& p, int64_t block_size,
                                 const int32_t* block_slots, int64_t max_blocks, float* pool,
                                 int64_t num_rows);

// One decode step, in place on the conv-state pool.
Status causal_conv1d_update(const CausalConv1dUpdateParams& p);

}  // namespace deltacheck::kernels::cpu
