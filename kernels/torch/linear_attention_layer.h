// The linear-attention (Gated DeltaNet) layer between its projections, in ATen tensor ops:
// mixed q|k|v -> causal conv1d + SiLU -> split -> (L2 norm of q, k) -> gates -> gated delta rule
// -> gated RMS norm with z. Packed sequences stay separate at every step (conv context, recurrent
// state), which is exactly what the leaking fallbacks got wrong.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace deltacheck::kernels::torch {

struct LinearAttentionWeights {
  int64_t num_heads = 1;        // H  (q, k heads)
  int64_t num_value_heads = 1;  // HV (HV % H == 0)
  int64_t key_dim = 0;          // K
  int64_t value_dim = 0;        // V
  at::Tensor conv_weight;       // [D, W], D = 2 * H * K + HV * V, channels ordered q | k | v
  at::Tensor conv_bias;         // [D] or undefined
  at::Tensor A_log;             // [HV]
  at::Tensor dt_bias;           // [HV]
  at::Tensor norm_weight;       // [V]
  double norm_eps = 1e-6;
  bool use_qk_l2norm = true;
  double scale = 0.0;  // <= 0: K^-0.5
};

// kChunked: prefill through the chunked rule. kRecurrent: the token recurrence. kDecode: a
// serving decode step, one token per sequence: causal_conv1d_update on the conv states and the
// recurrence.
enum class GdrForm { kChunked, kRecurrent, kDecode };

struct TorchLayerResult {
  at::Tensor output;            // [T, HV, V], dtype of mixed_qkv
  at::Tensor final_state;       // [N, HV, K, V] fp32
  at::Tensor final_conv_state;  // [N, D, W - 1]
};

// mixed_qkv: [T, D] packed tokens (the conv input); z: [T, HV, V] output gate; a, b: [T, HV]
// gate pre-activations. cu_seqlens: int32/int64 [N + 1] (absent: one sequence). initial_state:
// [N, HV, K, V], initial_conv_state: [N, D, W - 1]; absent: zeros.
// Throws std::invalid_argument with a one-line message on inconsistent shapes.
TorchLayerResult linear_attention_layer(
    const at::Tensor& mixed_qkv, const at::Tensor& z, const at::Tensor& a, const at::Tensor& b,
    const LinearAttentionWeights& weights,
    const std::optional<at::Tensor>& cu_seqlens = std::nullopt,
    const std::optional<at::Tensor>& initial_state = std::nullopt,
    const std::optional<at::Tensor>& initial_conv_state = std::nullopt,
    GdrForm form = GdrForm::kChunked, int64_t chunk_size = 64);

}  // namespace deltacheck::kernels::torch
