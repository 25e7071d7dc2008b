// Depthwise causal 1-D convolution in FP64: the short convolution of the linear-attention layer.
//
// Per sequence, channel d and token t (weight[d, W-1] multiplies the current token):
//   y[t, d] = act(bias[d] + sum_{j < W} weight[d, j] * x[t - (W-1) + j, d])
// Positions before a sequence's first token read its conv state, the last W-1 inputs of what came
// before (conv_state[n, d, j], oldest first, as vLLM and FLA cache it), or zeros when it has none.
// Nothing is ever read across a packed boundary.
#pragma once

#include <cstdint>
#include <vector>

namespace deltacheck::reference {

struct CausalConv1dArgs {
  int64_t batch = 1;                // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;              // T
  int64_t channels = 0;             // D
  int64_t width = 4;                // W (2..4 in the models; any W >= 1 is accepted)
  const double* x = nullptr;        // [B, T, D]
  const double* weight = nullptr;   // [D, W]
  const double* bias = nullptr;     // [D] or nullptr
  bool silu = true;                 // SiLU activation; false: identity
  std::vector<int64_t> cu_seqlens;  // [N + 1]; empty: N = B sequences of length T
  // [N, D, W-1]; nullptr: every sequence starts from zeros.
  const double* initial_state = nullptr;
  // [N]; false: that sequence starts from zeros. Empty: every sequence reads initial_state.
  std::vector<bool> has_initial_state;
};

struct CausalConv1dResult {
  std::vector<double> output;  // [B, T, D]
  // [N, D, W-1]: the last W-1 inputs of each sequence, reaching into its initial state when the
  // sequence is shorter than W-1 (a zero-length sequence returns its initial state unchanged).
  std::vector<double> final_state;
};

// Throws std::invalid_argument when args do not describe a valid problem.
CausalConv1dResult causal_conv1d(const CausalConv1dArgs& args);

// One decode step: one new token per sequence against its conv state.
struct CausalConv1dUpdateArgs {
  int64_t num_seqs = 0;            // N
  int64_t channels = 0;            // D
  int64_t width = 4;               // W
  const double* x = nullptr;       // [N, D]
  const double* state = nullptr;   // [N, D, W-1]; nullptr: zeros
  const double* weight = nullptr;  // [D, W]
  const double* bias = nullptr;    // [D] or nullptr
  bool silu = true;
};

// Returns output [N, D] and the shifted conv state [N, D, W-1] as final_state.
CausalConv1dResult causal_conv1d_update(const CausalConv1dUpdateArgs& args);

}  // namespace deltacheck::reference
