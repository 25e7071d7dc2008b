// CPU backward of the depthwise causal conv1d (kernels/cpu/causal_conv1d.h) on raw buffers, fp32
// accumulation: given the forward's inputs and d(out) (and optionally d(final conv state)), the
// gradients of x, the weight, the bias and the initial conv state.
//
// Per sequence and channel the pre-activation is recomputed, taken through SiLU and spread back
// over the W inputs it read; a sequence's positions before its first token are its own conv state,
// so their gradient goes to that sequence's d(initial state) and nowhere else. dweight and dbias
// sum over every token of every sequence (all B rows, or all packed sequences). Threads split the
// channels, and each channel runs its sequences in order, so no two threads write one element and
// the bits do not depend on the thread count.
//
// Unlike the forward, cu_seqlens may end before T: tokens past cu_seqlens[-1] belong to no
// sequence and get exactly zero dx. A zero-length sequence's d(initial state) equals its d(final
// state). State slots (pools) are not supported by the backward.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"

namespace deltacheck::kernels::cpu {

struct CausalConv1dBackwardParams {
  int64_t batch = 1;                     // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;                   // T
  int64_t channels = 0;                  // D
  int64_t width = 4;                     // W; 2, 3 or 4
  DType dtype = DType::kF32;             // of x, d_out and dx
  const void* x = nullptr;               // [B, T, D]
  const float* weight = nullptr;         // [D, W]
  const float* bias = nullptr;           // [D] or nullptr
  bool silu = true;                      // SiLU activation; false: identity
  const int64_t* cu_seqlens = nullptr;   // [num_seqs + 1] (may end before T) or nullptr
  int64_t num_seqs = 0;                  // used only with cu_seqlens
  const float* initial_state = nullptr;  // fp32 [N, D, W-1] or nullptr (zeros)
  const void* d_out = nullptr;           // [B, T, D] the gradient of the output
  const float* d_final_state = nullptr;  // fp32 [N, D, W-1] or nullptr (zero)
  void* dx = nullptr;                    // [B, T, D], every element written
  float* dweight = nullptr;              // [D, W]
  float* dbias = nullptr;                // [D] or nullptr (not kept)
  float* dinitial_state = nullptr;       // [N, D, W-1] or nullptr (not kept)
  int num_threads = 0;                   // 0: all hardware threads
};

Status causal_conv1d_backward(const CausalConv1dBackwardParams& p);

}  // namespace deltacheck::kernels::cpu
