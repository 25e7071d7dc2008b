// Composition of the LibTorch layer pieces; each piece validates its own inputs, this file checks
// only what ties them together (the channel split and z's shape).
#include "kernels/torch/linear_attention_layer.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "kernels/torch/causal_conv1d.h"
#include "kernels/torch/gated_delta_rule.h"
#include "kernels/torch/gated_rms_norm.h"
#include "kernels/torch/gates.h"
#include "kernels/torch/varlen.h"

namespace deltacheck::kernels::torch {

TorchLayerResult linear_attention_layer(const at::Tensor& mixed_qkv, const at::Tensor& z,
                                        const at::Tensor& a, const at::Tensor& b,
                                        const LinearAttentionWeights& weights,
                                        const std::optional<at::Tensor>& cu_seqlens,
                                        const std::optional<at::Tensor>& initial_state,
                                        const std::optional<at::Tensor>& initial_conv_state,
                                        GdrForm form, int64_t chunk_size) {
  constexpr const char* kWho = "linear_attention_layer";
  const int64_t H = weights.num_heads, HV = weights.num_value_heads;
  const int64_t K = weights.key_dim, V = weights.value_dim;
  const int64_t D = 2 * H * K + HV * V;
  if (!mixed_qkv.defined() || mixed_qkv.dim() != 2 || mixed_qkv.size(1) != D) {
    fail(kWho, "mixed_qkv must be [T, 2*H*K + HV*V] = [T, " + std::to_string(D) + "], got " +
                   (mixed_qkv.defined() ? shape_string(mixed_qkv) : std::string("undefined")));
  }
  const int64_t T = mixed_qkv.size(0);
  if (!z.defined() || z.dim() != 3 || z.size(0) != T || z.size(1) != HV || z.size(2) != V) {
    fail(kWho, "z must be [T, HV, V] = [" + std::to_string(T) + ", " + std::to_string(HV) + ", " +
                   std::to_string(V) + "]");
  }
  if (!a.defined() || a.dim() != 2 || a.size(0) != T || a.size(1) != HV) {
    fail(kWho, "a and b must be [T, HV] = [" + std::to_string(T) + ", " + std::to_string(HV) + "]");
  }

  const std::optional<at::Tensor> conv_bias =
      weights.conv_bias.defined() ? std::optional<at::Tensor>(weights.conv_bias) : std::nullopt;
  if (form == GdrForm::kDecode) {
    const std::vector<int64_t> bounds = sequence_bounds(cu_seqlens, 1, T, kWho);
    for (size_t i = 0; i + 1 < bounds.size(); ++i)
      if (bounds[i + 1] - bounds[i] != 1)
        fail(kWho, "decode takes one token per sequence; sequence " + std::to_string(i) + " has " +
                       std::to_string(bounds[i + 1] - bounds[i]));
  }
  TorchConvResult conv =
      form == GdrForm::kDecode
          ? causal_conv1d_update(mixed_qkv, weights.conv_weight, conv_bias, initial_conv_state,
                                 /*apply_silu=*/true)
          : causal_conv1d(mixed_qkv, weights.conv_weight, conv_bias, cu_seqlens, initial_conv_state,
                          /*apply_silu=*/true);
  const at::Tensor q = conv.output.narrow(1, 0, H * K).reshape({1, T, H, K});
  const at::Tensor k = conv.output.narrow(1, H * K, H * K).reshape({1, T, H, K});
  const at::Tensor v = conv.output.narrow(1, 2 * H * K, HV * V).reshape({1, T, HV, V});
  TorchGates gates = gdn_gates(a, b, weights.A_log, weights.dt_bias);
  const at::Tensor g = gates.g.reshape({1, T, HV}), beta = gates.beta.reshape({1, T, HV});

  TorchGdrResult rule =
      form == GdrForm::kChunked
          ? chunked_gated_delta_rule(q, k, v, g, beta, cu_seqlens, initial_state, weights.scale,
                                     weights.use_qk_l2norm, chunk_size, true)
          : recurrent_gated_delta_rule(q, k, v, g, beta, cu_seqlens, initial_state, weights.scale,
                                       weights.use_qk_l2norm, true);
  TorchLayerResult r;
  r.output =
      gated_rms_norm(rule.output.reshape({T, HV, V}), z, weights.norm_weight, weights.norm_eps);
  r.final_state = rule.final_state;
  r.final_conv_state = conv.final_state;
  return r;
}

}  // namespace deltacheck::kernels::torch
