// FP64 linear-attention layer: the convolution, gates, gated delta rule and output norm composed.
#include "reference/linear_attention_layer.h"

#include <stdexcept>
#include <utility>

#include "reference/causal_conv1d.h"
#include "reference/gated_delta_rule.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"

namespace deltacheck::reference {

int64_t qkv_channels(const LinearAttentionLayerArgs& args) {
  return 2 * args.num_heads * args.key_dim + args.num_value_heads * args.value_dim;
}

LinearAttentionLayerRuleInputs linear_attention_layer_rule_inputs(
    const LinearAttentionLayerArgs& args) {
  if (!args.qkv || !args.z || !args.a || !args.b || !args.conv_weight || !args.A_log ||
      !args.dt_bias || !args.norm_weight)
    throw std::invalid_argument(
        "linear_attention_layer: qkv, z, a, b, conv_weight, A_log, dt_bias and norm_weight are "
        "required");
  if (args.num_heads < 1 || args.num_value_heads < 1 || args.key_dim < 1 || args.value_dim < 1)
    throw std::invalid_argument("linear_attention_layer: head counts and head dims must be >= 1");
  const int64_t T = args.seq_len, H = args.num_heads, HV = args.num_value_heads;
  const int64_t K = args.key_dim, V = args.value_dim, D = qkv_channels(args);
  LinearAttentionLayerRuleInputs in;

  CausalConv1dArgs& conv = in.conv;
  conv.seq_len = T;
  conv.channels = D;
  conv.width = args.conv_width;
  conv.x = args.qkv;
  conv.weight = args.conv_weight;
  conv.bias = args.conv_bias;
  conv.silu = true;
  conv.cu_seqlens = args.cu_seqlens;
  conv.initial_state = args.initial_conv_state;
  in.mixed = causal_conv1d(conv);
  if (T == 0) return in;

  in.q.resize(static_cast<size_t>(T * H * K));
  in.k.resize(in.q.size());
  in.v.resize(static_cast<size_t>(T * HV * V));
  for (int64_t t = 0; t < T; ++t) {
    const double* row = in.mixed.output.data() + t * D;
    for (int64_t i = 0; i < H * K; ++i) {
      in.q[t * H * K + i] = row[i];
      in.k[t * H * K + i] = row[H * K + i];
    }
    for (int64_t i = 0; i < HV * V; ++i) in.v[t * HV * V + i] = row[2 * H * K + i];
  }

  GatesArgs& ga = in.gates_args;
  ga.num_tokens = T;
  ga.num_value_heads = HV;
  ga.a = args.a;
  ga.b = args.b;
  ga.A_log = args.A_log;
  ga.dt_bias = args.dt_bias;
  in.gates = gates(ga);

  GatedDeltaRuleArgs& rule = in.rule;
  rule.seq_len = T;
  rule.num_heads = H;
  rule.num_value_heads = HV;
  rule.key_dim = K;
  rule.value_dim = V;
  rule.q = in.q.data();
  rule.k = in.k.data();
  rule.v = in.v.data();
  rule.g = in.gates.g.data();
  rule.beta = in.gates.beta.data();
  rule.cu_seqlens = args.cu_seqlens;
  rule.initial_state = args.initial_state;
  rule.scale = args.scale;
  rule.use_qk_l2norm = true;
  return in;
}

LinearAttentionLayerResult linear_attention_layer(const LinearAttentionLayerArgs& args) {
  LinearAttentionLayerRuleInputs in = linear_attention_layer_rule_inputs(args);
  const int64_t T = args.seq_len, HV = args.num_value_heads;
  const int64_t K = args.key_dim, V = args.value_dim;
  if (T == 0) {
    // No tokens at all: every sequence is empty and keeps the states it came with.
    const int64_t n_seqs =
        args.cu_seqlens.empty() ? 1 : static_cast<int64_t>(args.cu_seqlens.size()) - 1;
    LinearAttentionLayerResult r;
    const size_t state_size = static_cast<size_t>(n_seqs * HV * K * V);
    r.final_state = args.initial_state
                        ? std::vector<double>(args.initial_state, args.initial_state + state_size)
                        : std::vector<double>(state_size, 0.0);
    r.final_conv_state = std::move(in.mixed.final_state);
    return r;
  }
  GatedDeltaRuleResult core = gated_delta_rule(in.rule);

  GatedRmsNormArgs norm;
  norm.num_tokens = T;
  norm.num_heads = HV;
  norm.dim = V;
  norm.x = core.output.data();
  norm.z = args.z;
  norm.weight = args.norm_weight;
  norm.eps = args.norm_eps;

  LinearAttentionLayerResult r;
  r.output = gated_rms_norm(norm);
  r.final_state = std::move(core.final_state);
  r.final_conv_state = std::move(in.mixed.final_state);
  return r;
}

}  // namespace deltacheck::reference
