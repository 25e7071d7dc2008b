// The linear-attention (Gated DeltaNet) layer of Qwen3-Next in FP64, composed the way the model
// composes it, from the projections onward:
//   qkv -> causal conv1d + SiLU -> split q | k | v -> gates (g, beta) from a, b
//       -> gated delta rule with in-kernel L2 norm of q and k -> gated RMS norm with z
// Packed sequences (cu_seqlens) never see each other: the convolution and the rule both restart at
// every boundary, from the sequence's carried-in conv and recurrent states (or zeros).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "reference/causal_conv1d.h"
#include "reference/gated_delta_rule.h"
#include "reference/gates.h"

namespace deltacheck::reference {

struct LinearAttentionLayerArgs {
  int64_t seq_len = 0;                  // T, all sequences packed
  int64_t num_heads = 1;                // H (q, k heads)
  int64_t num_value_heads = 1;          // HV; HV % H == 0
  int64_t key_dim = 0;                  // K
  int64_t value_dim = 0;                // V
  int64_t conv_width = 4;               // W
  const double* qkv = nullptr;          // [T, D], D = 2*H*K + HV*V, channels q | k | v
  const double* z = nullptr;            // [T, HV, V], the output gate
  const double* a = nullptr;            // [T, HV], decay projection
  const double* b = nullptr;            // [T, HV], beta projection
  const double* conv_weight = nullptr;  // [D, W]
  const double* conv_bias = nullptr;    // [D] or nullptr
  const double* A_log = nullptr;        // [HV]
  const double* dt_bias = nullptr;      // [HV]
  const double* norm_weight = nullptr;  // [V]
  double norm_eps = 1e-6;
  std::vector<int64_t> cu_seqlens;             // [N + 1]; empty: one sequence of T tokens
  const double* initial_state = nullptr;       // [N, HV, K, V]; nullptr: zeros
  const double* initial_conv_state = nullptr;  // [N, D, W-1]; nullptr: zeros
  std::optional<double> scale;                 // default K^-0.5
};

struct LinearAttentionLayerResult {
  std::vector<double> output;            // [T, HV, V]
  std::vector<double> final_state;       // [N, HV, K, V]
  std::vector<double> final_conv_state;  // [N, D, W-1]
};

// D, the number of mixed q | k | v channels the convolution runs over.
int64_t qkv_channels(const LinearAttentionLayerArgs& args);

// What the layer hands the gated delta rule, shared by the forward and its backward
// (reference/linear_attention_layer_backward.h): the convolution and its output split into
// q | k | v, the gates, and the rule's arguments, which point into q, k, v and the gates (so this
// moves but does not copy).
struct LinearAttentionLayerRuleInputs {
  CausalConv1dArgs conv;
  CausalConv1dResult mixed;
  std::vector<double> q, k, v;  // [T, H, K], [T, H, K], [T, HV, V]
  GatesArgs gates_args;
  GatesResult gates;
  GatedDeltaRuleArgs rule;
  LinearAttentionLayerRuleInputs() = default;
  LinearAttentionLayerRuleInputs(LinearAttentionLayerRuleInputs&&) = default;
  LinearAttentionLayerRuleInputs(const LinearAttentionLayerRuleInputs&) = delete;
};

// Throws std::invalid_argument when args do not describe a valid problem.
LinearAttentionLayerRuleInputs linear_attention_layer_rule_inputs(
    const LinearAttentionLayerArgs& args);

// Throws std::invalid_argument when args do not describe a valid problem.
LinearAttentionLayerResult linear_attention_layer(const LinearAttentionLayerArgs& args);

}  // namespace deltacheck::reference
