// CPU linear-attention (Gated DeltaNet) layer of Qwen3-Next on raw buffers, composed the way the
// model composes it, from the projections onward:
//   qkv -> causal_conv1d + SiLU -> split q | k | v -> gates -> chunked_gated_delta_rule with
//   in-kernel L2 norm -> gated_rms_norm with z
// A decode step (one token per sequence) runs the conv as causal_conv1d_update and the rule as
// recurrent_decode, in place on the state rows, as serving runtimes step their decode batches.
// Intermediates are kept in the activation dtype between the steps, as the model keeps them (g in
// fp32); every step accumulates in fp32. Recurrent and conv states are fp32 rows of two pools,
// addressed through the same per-sequence slots.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/cpu/gated_delta_rule.h"

namespace deltacheck::kernels::cpu {

struct LinearAttentionLayerParams {
  int64_t seq_len = 0;                 // T, all sequences packed
  int64_t num_heads = 1;               // H (q, k heads)
  int64_t num_value_heads = 1;         // HV; HV % H == 0
  int64_t key_dim = 0;                 // K
  int64_t value_dim = 0;               // V
  int64_t conv_width = 4;              // W; 2, 3 or 4
  DType dtype = DType::kF32;           // of qkv, z, a, b, out and the intermediates
  const void* qkv = nullptr;           // [T, D], D = 2*H*K + HV*V, channels q | k | v
  const void* z = nullptr;             // [T, HV, V], the output gate
  const void* a = nullptr;             // [T, HV], decay projection
  const void* b = nullptr;             // [T, HV], beta projection
  const float* conv_weight = nullptr;  // [D, W]
  const float* conv_bias = nullptr;    // [D] or nullptr
  const float* A_log = nullptr;        // [HV]
  const float* dt_bias = nullptr;      // [HV]
  const float* norm_weight = nullptr;  // [V]
  float norm_eps = 1e-6f;
  void* out = nullptr;                  // [T, HV, V]
  const int64_t* cu_seqlens = nullptr;  // [num_seqs + 1]; nullptr: one sequence of T tokens
  int64_t num_seqs = 0;                 // used only with cu_seqlens
  // Sequence i reads and writes row state_slots[i] (or i) of the state buffers; a negative slot
  // marks a padding entry: nothing of it is read, written or computed (its output rows included).
  // initial == final is allowed (in place on a pool); initial nullptr: zeros; final nullptr: not
  // kept.
  const float* initial_state = nullptr;       // [rows, HV, K, V]
  float* final_state = nullptr;               // [rows, HV, K, V]
  const float* initial_conv_state = nullptr;  // [rows, D, W-1]
  float* final_conv_state = nullptr;          // [rows, D, W-1]
  const int32_t* state_slots = nullptr;
  int64_t num_state_rows = 0;  // rows of the state buffers, for bounds checks (0: = num_seqs)
  float scale = 0.0f;          // <= 0: K^-0.5
  int64_t chunk_size = 64;
  // Every sequence has exactly decode_tokens tokens (1: a decode step): causal_conv1d_update and
  // recurrent_decode, updating the final state rows in place (seeded from the initial rows, or
  // zeros); without final buffers the updated states go to a scratch copy.
  bool decode = false;
  int64_t decode_tokens = 1;
  // [num_seqs] or nullptr: 0 = the sequence starts from zero recurrent and conv states whatever
  // its rows hold (vLLM's has_initial_state: a new request on a recycled row; docs/serving.md, the
  // has-initial-state contract), in the prefill and the decode step alike.
  const uint8_t* has_initial_state = nullptr;
  // Speculative verify (decode with decode_tokens = 1 + k; vLLM's spec decode of the layer,
  // docs/serving.md, cache=accept): state_indices [num_seqs, decode_tokens] and
  // num_accepted_tokens [num_seqs] as recurrent_decode takes them; the conv row of sequence i is
  // row state_indices[i, 0] of conv rows of conv_state_columns (W - 2 + decode_tokens) columns,
  // its window from column num_accepted_tokens[i] - 1 (causal_conv1d_update). In place: the
  // initial state buffers are the final ones (or nullptr). state_slots is unused.
  const int32_t* state_indices = nullptr;
  const int32_t* num_accepted_tokens = nullptr;
  int64_t conv_state_columns = 0;  // 0: W - 1
  // Block checkpoints of a prefill (docs/serving.md, cache=ckpt): the recurrent state of every
  // block into checkpoints->pool (chunked_gated_delta_rule's StateCheckpoints) and the conv state
  // after the same token into the same row of conv_checkpoint_pool [checkpoints->num_rows, D,
  // W-1] (causal_conv1d_checkpoints). Not with decode.
  const StateCheckpoints* checkpoints = nullptr;
  float* conv_checkpoint_pool = nullptr;
  // Optional, with decode: both states after every token (multi-token decode, docs/serving.md,
  // cache=spec): fp32 [num_seqs, decode_tokens, HV, K, V] and [num_seqs, decode_tokens, D, W-1].
  float* token_states = nullptr;
  float* token_conv_states = nullptr;
  int num_threads = 0;  // 0: all hardware threads
};

// D, the number of mixed q | k | v channels the convolution runs over.
int64_t qkv_channels(const LinearAttentionLayerParams& p);

// Checks everything before running any step, so a rejected call leaves every buffer as it was.
Status linear_attention_layer(const LinearAttentionLayerParams& p);

}  // namespace deltacheck::kernels::cpu
