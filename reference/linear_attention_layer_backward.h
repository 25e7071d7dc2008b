// The backward of the linear-attention layer (reference/linear_attention_layer.h) in FP64: the
// oracle for layer gradient checks. The forward is recomputed, then each part's backward runs in
// reverse order: gated RMS norm, gated delta rule, gates, causal conv1d (each in its own file
// next to its forward).
//
// Unlike the forward, cu_seqlens may end before T: tokens past cu_seqlens[-1] belong to no
// sequence and get exactly zero in every per-token gradient, whatever their inputs hold, and add
// nothing to the parameter gradients. A zero-length sequence's d(initial state) and d(initial conv
// state) equal its d(final state) and d(final conv state).
#pragma once

#include <vector>

#include "reference/linear_attention_layer.h"

namespace deltacheck::reference {

struct LinearAttentionLayerGradients {
  std::vector<double> dqkv;                 // [T, D]
  std::vector<double> dz;                   // [T, HV, V]
  std::vector<double> da;                   // [T, HV]
  std::vector<double> db;                   // [T, HV]
  std::vector<double> dconv_weight;         // [D, W]
  std::vector<double> dconv_bias;           // [D] (also when the forward had no bias)
  std::vector<double> dA_log;               // [HV]
  std::vector<double> ddt_bias;             // [HV]
  std::vector<double> dnorm_weight;         // [V]
  std::vector<double> dinitial_state;       // [N, HV, K, V]
  std::vector<double> dinitial_conv_state;  // [N, D, W-1]
};

struct LinearAttentionLayerUpstream {
  const double* d_output = nullptr;            // [T, HV, V], required
  const double* d_final_state = nullptr;       // [N, HV, K, V]; nullptr: zero
  const double* d_final_conv_state = nullptr;  // [N, D, W-1]; nullptr: zero
};

// Throws std::invalid_argument naming the inconsistency when the problem is not valid.
LinearAttentionLayerGradients linear_attention_layer_backward(
    const LinearAttentionLayerArgs& args, const LinearAttentionLayerUpstream& upstream);

}  // namespace deltacheck::reference
