// The backward of the depthwise causal conv1d (reference/causal_conv1d.h) in FP64.
//
// Given the forward's inputs, d(output) and optionally d(final conv state), returns the gradients
// of x, the weight, the bias and the initial conv state. Per sequence and channel the
// pre-activation is recomputed, taken through SiLU, and spread back over the W inputs each output
// read; dweight and dbias sum over every token of every sequence (all B rows, or all packed
// sequences), and a sequence's positions before its first token feed its own d(initial state)
// only: nothing crosses a packed boundary.
//
// Unlike the forward, cu_seqlens may end before T: tokens past cu_seqlens[-1] belong to no sequence
// and get exactly zero dx. A zero-length sequence's d(initial state) equals its d(final state).
#pragma once

#include <vector>

#include "reference/causal_conv1d.h"

namespace deltacheck::reference {

struct CausalConv1dGradients {
  std::vector<double> dx;       // [B, T, D]
  std::vector<double> dweight;  // [D, W]
  std::vector<double> dbias;    // [D] (also when the forward had no bias)
  // [N, D, W-1]; for a sequence without a state, the gradient w.r.t. the zeros it starts from.
  std::vector<double> dinitial_state;
};

// d_output: [B, T, D], required when there are tokens. d_final_state: [N, D, W-1]; nullptr means
// zero. Throws std::invalid_argument when the problem is not valid.
CausalConv1dGradients causal_conv1d_backward(const CausalConv1dArgs& args, const double* d_output,
                                             const double* d_final_state);

}  // namespace deltacheck::reference
