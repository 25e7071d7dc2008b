// CPU backward of the linear-attention layer (kernels/cpu/linear_attention_layer.h) on raw
// buffers: the forward is recomputed on the live tokens (conv, split, gates, chunked rule), then
// each part's backward runs last first: the gated RMS norm, the rule (the chunked CPU backward,
// kernels/cpu/gated_delta_rule_backward.h), the gates, the conv (causal_conv1d_backward.h).
// Intermediates are kept in the activation dtype between the steps, as the forward keeps them (g
// and dg in fp32); every step accumulates in fp32. Parameter gradients are summed in a fixed order
// over fixed blocks of tokens (or per channel), so the bits do not depend on the thread count.
//
// The contract is reference/linear_attention_layer_backward.h's: cu_seqlens may end before T;
// tokens past cu_seqlens[-1] get exactly zero in dqkv, dz, da and db and add nothing to the
// parameter gradients. State slots (pools) and decode steps are not supported (Unsupported).
#pragma once

#include "core/status.h"
#include "kernels/cpu/linear_attention_layer.h"

namespace deltacheck::kernels::cpu {

struct LinearAttentionLayerBackwardParams {
  // The forward's problem; its out, final_state and final_conv_state are not used (may be null),
  // and its cu_seqlens may end before seq_len.
  LinearAttentionLayerParams forward;
  const void* d_output = nullptr;             // [T, HV, V] in forward.dtype, required
  const float* d_final_state = nullptr;       // [N, HV, K, V]; nullptr: zero
  const float* d_final_conv_state = nullptr;  // [N, D, W-1]; nullptr: zero
  void* dqkv = nullptr;                       // [T, D] in forward.dtype
  void* dz = nullptr;                         // [T, HV, V] in forward.dtype
  void* da = nullptr;                         // [T, HV] in forward.dtype
  void* db = nullptr;                         // [T, HV] in forward.dtype
  float* dconv_weight = nullptr;              // [D, W]
  float* dconv_bias = nullptr;                // [D]; nullptr: not kept
  float* dA_log = nullptr;                    // [HV]
  float* ddt_bias = nullptr;                  // [HV]
  float* dnorm_weight = nullptr;              // [V]
  float* dinitial_state = nullptr;            // [N, HV, K, V]; nullptr: not kept
  float* dinitial_conv_state = nullptr;       // [N, D, W-1]; nullptr: not kept
};

// Checks everything before writing any output.
Status linear_attention_layer_backward(const LinearAttentionLayerBackwardParams& p);

}  // namespace deltacheck::kernels::cpu
