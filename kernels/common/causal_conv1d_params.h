// The short causal convolution's problem on raw buffers, shared by every kernel family
// (kernels/cpu/causal_conv1d.h, kernels/cuda/causal_conv1d.h): the CPU kernels take host pointers,
// the CUDA kernels device pointers. The convolution itself is docs/semantics.md, "Around the rule";
// reference/causal_conv1d.h computes it in FP64.
//
// y[t, d] = act(bias[d] + sum_{j < W} weight[d, j] * x[t - (W-1) + j, d]); positions before a
// sequence's first token read its conv state (the last W-1 inputs, [D, W-1] oldest first, as vLLM
// and FLA cache it) or zeros. Nothing is read across a packed boundary.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace deltacheck::kernels {

// Prefill, packed (cu_seqlens) or batched.
struct CausalConv1dParams {
  int64_t batch = 1;                    // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;                  // T
  int64_t channels = 0;                 // D
  int64_t width = 4;                    // W; CPU 2, 3 or 4, CUDA 1..8 (others: Unsupported)
  DType dtype = DType::kF32;            // of x and out
  const void* x = nullptr;              // [B, T, D]
  void* out = nullptr;                  // [B, T, D]
  const float* weight = nullptr;        // [D, W]; weight[d, W-1] multiplies the current token
  const float* bias = nullptr;          // [D] or nullptr
  bool silu = true;                     // SiLU activation; false: identity
  const int64_t* cu_seqlens = nullptr;  // [num_seqs + 1] or nullptr (num_seqs = B)
  int64_t num_seqs = 0;                 // used only with cu_seqlens
  // Conv states are fp32 [rows, D, W-1]. Sequence i reads row state_slots[i] (or i) of
  // initial_state and writes the same row of final_state. A negative slot marks a padding entry:
  // nothing of it is read, written or computed (its output rows included). initial_state ==
  // final_state is allowed (in place on a pool; the CUDA kernels need the non-negative slots
  // distinct). initial_state nullptr: zeros; final_state nullptr: not kept.
  const float* initial_state = nullptr;
  float* final_state = nullptr;
  const int32_t* state_slots = nullptr;
  int64_t num_state_rows = 0;  // rows of the state buffers, for bounds checks (0: = num_seqs)
  // [num_seqs]: 0 = this sequence starts from zeros whatever its row holds. nullptr: every
  // sequence reads initial_state (when given).
  const uint8_t* has_initial_state = nullptr;
  int num_threads = 0;  // CPU kernels: 0 = all hardware threads; the CUDA kernels ignore it
};

// One decode step, in place: one new token per sequence against its row of the conv-state pool.
struct CausalConv1dUpdateParams {
  int64_t num_seqs = 0;           // N
  int64_t channels = 0;           // D
  int64_t width = 4;              // W; CPU 2, 3 or 4, CUDA 1..8
  DType dtype = DType::kF32;      // of x and out
  const void* x = nullptr;        // [N, D]
  void* out = nullptr;            // [N, D]
  const float* weight = nullptr;  // [D, W]
  const float* bias = nullptr;    // [D] or nullptr
  bool silu = true;
  float* state = nullptr;                // fp32 [num_state_rows, D, C], read and shifted in place
  const int32_t* state_slots = nullptr;  // [N]; nullptr: sequence i uses row i; negative: padding
  int64_t num_state_rows = 0;            // 0: = N
  // Several tokens per sequence (x, out [N, tokens, D]) and a row of C >= W-1 columns (0: W-1),
  // as vLLM's causal_conv1d_update takes a speculative verify (docs/serving.md, cache=accept):
  // sequence i's window is columns [a - 1, a - 1 + W - 1) of its row, a = num_accepted_tokens[i]
  // (nullptr: a = 1), and the row afterwards holds the last C of (columns [0, a - 1 + W - 1), then
  // the call's tokens). C may be W - 1 .. W - 2 + tokens, a 1 .. C - W + 2. The defaults are the
  // one-token decode step: window = the row, shifted by the token.
  int64_t tokens_per_seq = 1;
  int64_t state_columns = 0;
  const int32_t* num_accepted_tokens = nullptr;
  // Optional fp32 [N, tokens, D, W-1]: the conv state after each token (its last W-1 inputs), so a
  // caller that accepts only the first m tokens can resume from token_states[i, m - 1].
  float* token_states = nullptr;
  int num_threads = 0;  // CPU kernels; the CUDA kernels ignore it
};

}  // namespace deltacheck::kernels
