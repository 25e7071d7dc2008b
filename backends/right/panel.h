// The false-positive panel's backends (right:recurrent, right:chunked, right:chunked-lowp): how a
// case's tensors become sequences for the rule formulations of rule.h, for the gdr op in every
// cache mode and for the whole linear-attention layer. Every sequence is computed from its own
// data only, on one thread, so the backends are deterministic and batch-invariant by
// construction.
#pragma once

#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::backends::right {

// Two planted bugs, no panel members (backends/wrong_regime_backends.cc): kChunkedLowpSolve is
// kChunkedLowp with the UT matrix's forward substitution carried in the activation dtype (every
// running sum rounded: wrong:ut-solve-lowp, regime=corrk); kRecurrentL2MaxEps is kRecurrent with
// q and k normalized as x / max(||x||, 1e-6) (wrong:l2norm-max-eps on the layer, regime=tinyqk).
// kChunkedCumsum: kChunked with each prefix sum of the gates rounded on its own (jnp.cumsum);
// kChunked128: kChunked by chunks of 128; kChunkedNormAct: kChunked with the q/k L2 norm in the
// activation dtype (Transformers 4.57). The last two are judged with their declared profiles.
enum class Formulation {
  kRecurrent,
  kChunked,
  kChunkedLowp,
  kChunkedLowpSolve,
  kRecurrentL2MaxEps,
  kChunkedCumsum,
  kChunked128,
  kChunkedNormAct
};

// One sequence of every head, token-major as the case stores it, widened to T (float in the
// backends, double in the self-test): q, k [length, H, K], v [length, HV, V], g, beta [length, HV].
template <typename T>
struct SequenceInputs {
  int64_t length = 0, H = 0, HV = 0, K = 0, V = 0;
  bool l2 = true;
  std::vector<T> q, k, v, g, beta;
};

// Runs the rule on every value head (value head i reads q/k head i / (HV / H)) from `state`
// [HV, K, V] (updated in place): o [length, HV, V] in T, and when token_states is not null the
// state after each token [length, HV, K, V]. `activations` is the case's dtype (the operand
// rounding of kChunkedLowp).
template <typename T>
void rule_sequence(Formulation f, cases::DType activations, const SequenceInputs<T>& in, T* state,
                   T* o, T* token_states);

// The gdr op in cache modes none, prefill, decode and (whole, one-shot) chunked/dynamic, and the
// pooled modes pool and spec (states in slot-addressed rows; padding entries skipped; rows
// nobody addresses copied unchanged).
Status run_gdr(Formulation f, const cases::Case& c, const cases::TensorMap& in,
               cases::TensorMap& out);

// The layer op: causal conv + SiLU, gates, the rule with in-kernel L2 norm, gated RMS norm.
Status run_layer(Formulation f, const cases::Case& c, const cases::TensorMap& in,
                 cases::TensorMap& out);

// The inputs of sequence [begin, begin + length) of a gdr case, widened to T.
template <typename T>
SequenceInputs<T> gdr_sequence(const cases::Case& c, const cases::TensorMap& in, int64_t begin,
                               int64_t length);

// Token offsets [N + 1] of a case's sequences: from cu_seqlens (int32 or int64) when given, else
// `rows` rows of `row_length` tokens.
std::vector<int64_t> sequence_offsets(const cases::TensorMap& in, int64_t rows, int64_t row_length);

}  // namespace deltacheck::backends::right
