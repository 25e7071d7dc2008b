// Decode in place on a state pool (continuous batching), on raw buffers, shared by every kernel
// family (kernels/cpu/recurrent_decode.h, kernels/cuda/gated_delta_rule.h): N sequences, each with
// tokens_per_seq new tokens (1: plain decode; > 1: speculative / multi-token decode). The CPU
// kernel takes host pointers, the CUDA kernel device pointers; the serving tables
// (state_indices, num_accepted_tokens, parents) are checked on the host by
// kernels/common/serving_rows.h. The rule is docs/semantics.md, "Gated delta rule".
#pragma once

#include <cstdint>

#include "core/half.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels {

struct RecurrentDecodeParams {
  int64_t num_seqs = 0;         // N
  int64_t tokens_per_seq = 1;   // new tokens per sequence
  int64_t num_heads = 1;        // H
  int64_t num_value_heads = 1;  // HV, HV % H == 0 (value head i uses q/k head i / (HV / H))
  int64_t key_dim = 0;          // K (the CUDA kernel: at most 128)
  int64_t value_dim = 0;        // V
  DType dtype = DType::kF32;    // of q, k, v, beta and o
  const void* q = nullptr;      // [N, tokens, H, K]
  const void* k = nullptr;      // [N, tokens, H, K]
  const void* v = nullptr;      // [N, tokens, HV, V]
  const float* g = nullptr;     // [N, tokens, HV] fp32 log-space decay
  const void* beta = nullptr;   // [N, tokens, HV]
  void* o = nullptr;            // [N, tokens, HV, V]
  // fp32 [num_state_rows, HV, K, V]: sequence i starts from row state_slots[i] (or i) and leaves
  // there the state after its last token. A negative slot marks a padding entry: nothing of it is
  // read, written or computed (its outputs and token states included).
  float* state = nullptr;
  const int32_t* state_slots = nullptr;  // [N]
  int64_t num_state_rows = 0;            // 0: = N
  // Optional fp32 [N, tokens, HV, K, V]: the state after each token, so a caller that accepts
  // only the first m draft tokens can resume from token_states[i, m - 1].
  float* token_states = nullptr;
  // Speculative verify with partial acceptance, as vLLM passes it (ssm_state_indices,
  // num_accepted_tokens; docs/serving.md). With state_indices [N, tokens] (state_slots is then
  // unused): sequence i starts from row state_indices[i, num_accepted_tokens[i] - 1] (the state
  // after the last accepted token of the previous call; the count includes the bonus token, so 1
  // means every draft was rejected) and writes the state after token t into row
  // state_indices[i, t], in place. A negative start row marks a padding entry; negative write rows
  // are not written. num_accepted_tokens nullptr: every count is 1.
  const int32_t* state_indices = nullptr;
  const int32_t* num_accepted_tokens = nullptr;  // [N], each in 1..tokens
  // Tree-shaped drafts (SGLang's retrieve_parent_token, FlashInfer's tree verify;
  // docs/serving.md): with parents [N, tokens] and state_indices [N, tokens] (num_accepted_tokens
  // unused), token t of sequence i starts from its parent's state, row state_indices[i,
  // parents[i, t]], or from row state_slots[i] (only read) where parents[i, t] is -1, and writes
  // its state into row state_indices[i, t]. Parents come before their children; every token's row
  // must be >= 0. A negative state_slots[i] marks a padding entry.
  const int32_t* parents = nullptr;
  float scale = 0.0f;          // <= 0: K^-0.5
  bool use_qk_l2norm = false;  // x / sqrt(sum(x^2) + 1e-6) on q and k
  int num_threads = 0;         // CPU kernels: 0 = all hardware threads; CUDA ignores it
};

// The decode layout of a prefill problem whose B * T tokens are sequences of `tokens` tokens each
// (the cache modes' calls): shapes, dtype, q/k/v/g/beta/o and the l2 flag from g; the states,
// slots and serving tables are the caller's to set.
inline RecurrentDecodeParams decode_layout(const GatedDeltaRuleParams& g, int64_t tokens) {
  RecurrentDecodeParams p;
  p.num_seqs = g.batch * g.seq_len / tokens;
  p.tokens_per_seq = tokens;
  p.num_heads = g.num_heads;
  p.num_value_heads = g.num_value_heads;
  p.key_dim = g.key_dim;
  p.value_dim = g.value_dim;
  p.dtype = g.dtype;
  p.q = g.q, p.k = g.k, p.v = g.v, p.g = g.g, p.beta = g.beta, p.o = g.o;
  p.use_qk_l2norm = g.use_qk_l2norm;
  p.num_threads = g.num_threads;
  return p;
}

}  // namespace deltacheck::kernels
