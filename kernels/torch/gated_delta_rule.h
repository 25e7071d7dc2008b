// The gated delta rule written with ATen tensor ops only, varlen-correct (docs/semantics.md, "Gated
// delta rule"): the counterpart of the plain-PyTorch chunked fallbacks, which carried state across
// packed sequences because they ignored cu_seqlens.
//
// chunked_gated_delta_rule: the chunked WY / UT-transform form. Every chunk of every sequence is
// prepared at once (batched, one unit-lower-triangular solve per chunk); only the chunk-to-chunk
// state hand-off is a scan, over chunk index, batched over all sequences still running.
// recurrent_gated_delta_rule: the token recurrence, batched over sequences and heads, for
// decode-sized calls and as the straightforward same-precision implementation.
//
// Inputs may be fp32, bf16 or fp16 and live on any device; arithmetic is fp32, the output has v's
// dtype and states are fp32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace deltacheck::kernels::torch {

struct TorchGdrResult {
  at::Tensor output;       // [B, T, HV, V], dtype of v
  at::Tensor final_state;  // [N, HV, K, V] fp32; undefined when not requested
};

// q, k: [B, T, H, K]; v: [B, T, HV, V]; g, beta: [B, T, HV] (g is the log-space decay).
// cu_seqlens: int32/int64 [N + 1] with B == 1 (zero-length sequences allowed); absent: N = B
// sequences of length T. initial_state: [N, HV, K, V] (any float dtype, used as fp32); absent:
// zeros. scale <= 0 means K^-0.5, applied to q after the optional L2 norm.
// Throws std::invalid_argument with a one-line message when the tensors do not describe a problem.
TorchGdrResult chunked_gated_delta_rule(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    const at::Tensor& beta, const std::optional<at::Tensor>& cu_seqlens = std::nullopt,
    const std::optional<at::Tensor>& initial_state = std::nullopt, double scale = 0.0,
    bool use_qk_l2norm = false, int64_t chunk_size = 64, bool output_final_state = true);

// Same contract as chunked_gated_delta_rule, one token step at a time.
TorchGdrResult recurrent_gated_delta_rule(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    const at::Tensor& beta, const std::optional<at::Tensor>& cu_seqlens = std::nullopt,
    const std::optional<at::Tensor>& initial_state = std::nullopt, double scale = 0.0,
    bool use_qk_l2norm = false, bool output_final_state = true);

// One decode step on a slot-addressed state pool, as serving runtimes call their recurrent kernel
// with state indices (continuous batching): q, k: [N, 1, H, K], v: [N, 1, HV, V], g, beta:
// [N, 1, HV], one token per entry. state_pool: fp32 [rows, HV, K, V], updated in place: entry i
// starts from row state_slots[i] and leaves its new state there. Padding entries (negative slot)
// are skipped: nothing of them is read or written, their output rows are zero; rows nobody
// addresses are not touched. Returns o [N, 1, HV, V] in v's dtype.
at::Tensor recurrent_decode_pooled(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& g, const at::Tensor& beta,
                                   at::Tensor& state_pool, const at::Tensor& state_slots,
                                   double scale = 0.0, bool use_qk_l2norm = false);

// x / sqrt(sum(x^2) + 1e-6) over the last dimension, in fp32 (result is fp32).
at::Tensor l2_normalize(const at::Tensor& x);

}  // namespace deltacheck::kernels::torch
