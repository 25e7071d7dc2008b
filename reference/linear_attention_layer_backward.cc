// FP64 backward of the linear-attention layer: the forward recomputed on the live tokens (the
// rule's inputs built as the forward builds them), then the parts' backwards chained in reverse;
// the padding tail's gradients stay zero.
#include "reference/linear_attention_layer_backward.h"

#include <algorithm>
#include <stdexcept>

#include "reference/causal_conv1d_backward.h"
#include "reference/gated_delta_rule_backward.h"
#include "reference/gated_rms_norm_backward.h"
#include "reference/gates_backward.h"

namespace deltacheck::reference {

LinearAttentionLayerGradients linear_attention_layer_backward(
    const LinearAttentionLayerArgs& args, const LinearAttentionLayerUpstream& up) {
  if (!up.d_output)
    throw std::invalid_argument(
        "linear_attention_layer_backward: d_output (the gradient of the output) is required");
  // The live tokens: everything before cu_seqlens[-1]. Every input is [T, ...] with the token
  // first, so the live problem is the same pointers with a shorter T.
  LinearAttentionLayerArgs live = args;
  if (!args.cu_seqlens.empty()) {
    if (args.cu_seqlens.back() < 0 || args.cu_seqlens.back() > args.seq_len)
      throw std::invalid_argument(
          "linear_attention_layer_backward: cu_seqlens[-1] must be in [0, T]");
    live.seq_len = args.cu_seqlens.back();
  }
  const LinearAttentionLayerRuleInputs in = linear_attention_layer_rule_inputs(live);
  const int64_t T = args.seq_len, TL = live.seq_len, H = args.num_heads, HV = args.num_value_heads;
  const int64_t K = args.key_dim, V = args.value_dim, D = qkv_channels(args);
  const int64_t N = args.cu_seqlens.empty() ? 1 : static_cast<int64_t>(args.cu_seqlens.size()) - 1;
  std::vector<double> core;  // the rule's output, the norm's input
  if (TL > 0) core = gated_delta_rule(in.rule).output;

  // Backward, last part first. Without live tokens only the states' gradients pass through.
  LinearAttentionLayerGradients r;
  GatedRmsNormGradients dn{{}, {}, std::vector<double>(static_cast<size_t>(V), 0.0)};
  GatedDeltaRuleGradients dr;
  GatesGradients dgt{{},
                     {},
                     std::vector<double>(static_cast<size_t>(HV), 0.0),
                     std::vector<double>(static_cast<size_t>(HV), 0.0)};
  if (TL > 0) {
    const GatedRmsNormArgs norm{TL, HV, V, core.data(), args.z, args.norm_weight, args.norm_eps};
    dn = gated_rms_norm_backward(norm, up.d_output);
    dr = gated_delta_rule_backward(in.rule, dn.dx.data(), up.d_final_state);
    dgt = gates_backward(in.gates_args, dr.dg.data(), dr.dbeta.data());
  } else {
    const size_t n = static_cast<size_t>(N * HV * K * V);
    dr.dh0 = up.d_final_state ? std::vector<double>(up.d_final_state, up.d_final_state + n)
                              : std::vector<double>(n, 0.0);
  }
  std::vector<double> dmixed(static_cast<size_t>(TL * D));
  for (int64_t t = 0; t < TL; ++t) {
    double* row = dmixed.data() + t * D;
    std::copy(dr.dq.begin() + t * H * K, dr.dq.begin() + (t + 1) * H * K, row);
    std::copy(dr.dk.begin() + t * H * K, dr.dk.begin() + (t + 1) * H * K, row + H * K);
    std::copy(dr.dv.begin() + t * HV * V, dr.dv.begin() + (t + 1) * HV * V, row + 2 * H * K);
  }
  CausalConv1dGradients dc = causal_conv1d_backward(in.conv, dmixed.data(), up.d_final_conv_state);

  // Per-token gradients padded with the tail's zeros.
  auto padded = [&](std::vector<double> x, int64_t per_token) {
    x.resize(static_cast<size_t>(T * per_token), 0.0);
    return x;
  };
  r.dqkv = padded(std::move(dc.dx), D);
  r.dz = padded(dn.dz, HV * V);
  r.da = padded(std::move(dgt.da), HV);
  r.db = padded(std::move(dgt.db), HV);
  r.dconv_weight = std::move(dc.dweight);
  r.dconv_bias = std::move(dc.dbias);
  r.dA_log = std::move(dgt.dA_log);
  r.ddt_bias = std::move(dgt.ddt_bias);
  r.dnorm_weight = dn.dweight;
  r.dinitial_state = std::move(dr.dh0);
  r.dinitial_conv_state = std::move(dc.dinitial_state);
  return r;
}

}  // namespace deltacheck::reference
