// CUDA kernels for the gated delta rule on raw device buffers (docs/semantics.md, "Gated delta
// rule").
//
// chunked_gated_delta_rule: the chunked (WY / UT-transform) form for prefill, one CTA per
// (sequence, value head, block of 32 value columns), the state slice in shared memory, chunks of
// at most 64 tokens that never straddle a sequence boundary. recurrent_gated_delta_rule: the plain
// token-by-token recurrence in fp32, the same-precision baseline. recurrent_decode: the same
// recurrence in place on a state pool, optionally writing the state after every token.
//
// The parameter struct is kernels/common/gated_delta_rule_params.h, the CPU kernels' own; every
// pointer is a device pointer. All calls are asynchronous on `stream`: a
// returned Ok means the launch was accepted, not that the kernel has finished.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cuda {

// Whether the chunked kernel can run p, judged from the host-side fields only (shapes, pointers,
// sizes, dtype). InvalidArgument for an inconsistent problem, Unsupported (with the reason) for a
// valid one the kernel does not handle (K > 128, chunk_size > 64). The recurrent kernels accept the
// same problems with any chunk_size (they ignore it). Every entry point checks this first.
Status gated_delta_rule_can_implement(const GatedDeltaRuleParams& p);

// Checks the device-side layout: cu_seqlens starts at 0, never decreases and ends at T; every
// slot is < num_state_rows and non-negative slots are distinct. Copies both arrays to the host and
// synchronizes `stream`. The kernels themselves skip a sequence whose bounds or slot are out of
// range (writing nothing for it) instead of touching memory outside the buffers.
Status validate_sequence_layout(const GatedDeltaRuleParams& p, cudaStream_t stream);

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);
Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);

// Decode in place on a state pool (continuous batching): N sequences, each with tokens_per_seq
// new tokens (1: plain decode; > 1: speculative / multi-token decode). Mirrors
// kernels/cpu/recurrent_decode.h; every pointer is a device pointer.
struct RecurrentDecodeParams {
  int64_t num_seqs = 0;         // N
  int64_t tokens_per_seq = 1;   // new tokens per sequence
  int64_t num_heads = 1;        // H
  int64_t num_value_heads = 1;  // HV, HV % H == 0 (value head i uses q/k head i / (HV / H))
  int64_t key_dim = 0;          // K, at most 128
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
  const int32_t* state_slots = nullptr;  // [N] on the device
  int64_t num_state_rows = 0;            // 0: = N
  // Optional fp32 [N, tokens, HV, K, V]: the state after each token, so a caller that accepts
  // only the first m draft tokens can resume from token_states[i, m - 1].
  float* token_states = nullptr;
  // The serving decode contracts, as kernels/cpu/recurrent_decode.h takes them (docs/serving.md;
  // the tables are checked on the host by kernels/common/serving_rows.h, which synchronizes
  // `stream`). Speculative verify with partial acceptance: with state_indices [N, tokens] (device;
  // state_slots unused) sequence i starts from row state_indices[i, num_accepted_tokens[i] - 1]
  // and writes the state after token t into row state_indices[i, t] (negative: not written; a
  // negative start row: a padding entry). Tree-shaped drafts: with parents [N, tokens] too, token t
  // starts from its parent's row state_indices[i, parents[i, t]], or from row state_slots[i] (only
  // read) where the parent is -1. token_states must be nullptr with state_indices.
  const int32_t* state_indices = nullptr;
  const int32_t* num_accepted_tokens = nullptr;  // [N], each in 1..tokens; nullptr: all 1
  const int32_t* parents = nullptr;
  float scale = 0.0f;          // <= 0: K^-0.5
  bool use_qk_l2norm = false;  // x / sqrt(sum(x^2) + 1e-6) on q and k
};

// The recurrent kernel on the decode layout (the same kernel as recurrent_gated_delta_rule).
Status recurrent_decode(const RecurrentDecodeParams& p, cudaStream_t stream);

}  // namespace deltacheck::kernels::cuda
