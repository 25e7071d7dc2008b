// The gated delta rule's problem on raw buffers, shared by every kernel family
// (kernels/cpu/gated_delta_rule.h, kernels/cuda/gated_delta_rule.h): the CPU kernels take host
// pointers, the CUDA kernels device pointers. The rule itself is docs/semantics.md, "Gated delta
// rule"; reference/gated_delta_rule.h computes it in FP64.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace deltacheck::kernels {

struct GatedDeltaRuleParams {
  int64_t batch = 1;                    // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;                  // T
  int64_t num_heads = 1;                // H
  int64_t num_value_heads = 1;          // HV, HV % H == 0 (value head i uses q/k head i / (HV / H))
  int64_t key_dim = 0;                  // K (the CUDA kernels: at most 128)
  int64_t value_dim = 0;                // V
  DType dtype = DType::kF32;            // of q, k, v, beta and o
  const void* q = nullptr;              // [B, T, H, K]
  const void* k = nullptr;              // [B, T, H, K]
  const void* v = nullptr;              // [B, T, HV, V]
  const float* g = nullptr;             // [B, T, HV] fp32 log-space decay
  const void* beta = nullptr;           // [B, T, HV]
  void* o = nullptr;                    // [B, T, HV, V]
  const int64_t* cu_seqlens = nullptr;  // [num_seqs + 1] or nullptr (num_seqs = B)
  int64_t num_seqs = 0;                 // used only with cu_seqlens
  // States are fp32 [rows, HV, K, V]. Sequence i reads row state_slots[i] (or i when state_slots
  // is nullptr) of initial_state, and writes the same row of final_state. A negative slot marks a
  // padding entry: nothing of it is read, written or computed (its output stays untouched).
  // initial_state == final_state is allowed (in place on a pool); non-negative slots must be
  // distinct. initial_state nullptr: zero state; final_state nullptr: not kept.
  const float* initial_state = nullptr;
  float* final_state = nullptr;
  const int32_t* state_slots = nullptr;  // [num_seqs]
  int64_t num_state_rows = 0;  // rows of the state buffers, for bounds checks (0: = num_seqs)
  float scale = 0.0f;          // <= 0: K^-0.5
  bool use_qk_l2norm = false;
  int64_t chunk_size = 64;  // chunked kernels only (CUDA: 1..64); the recurrent ones ignore it
  int num_threads = 0;      // CPU kernels: 0 = all hardware threads; CUDA ignores it
};

// The backward of the same problem (docs/gradients.md): the forward's inputs in `forward` (its o
// and final_state are not used; cu_seqlens may end before T), the upstream gradients in, the
// input gradients out. Every element of dq, dk, dv, dg and dbeta is written: tokens past
// cu_seqlens[-1] and tokens of a padding entry (negative slot) get exactly zero. dq and dk sum
// over the value heads that share a key head.
struct GatedDeltaRuleBackwardParams {
  GatedDeltaRuleParams forward;
  const void* d_output = nullptr;        // [B, T, HV, V] in forward.dtype (the gradient of o)
  const float* d_final_state = nullptr;  // fp32 [rows, HV, K, V], row by slot; nullptr: zero
  void* dq = nullptr;                    // [B, T, H, K] in forward.dtype
  void* dk = nullptr;                    // [B, T, H, K] in forward.dtype
  void* dv = nullptr;                    // [B, T, HV, V] in forward.dtype
  float* dg = nullptr;                   // [B, T, HV] fp32, like g
  void* dbeta = nullptr;                 // [B, T, HV] in forward.dtype
  // fp32 [rows, HV, K, V]: sequence i writes row state_slots[i] (or i), also without an initial
  // state; rows no sequence addresses stay untouched; nullptr: not kept. May be d_final_state.
  float* dh0 = nullptr;
  // kernels/cpu gated_delta_rule_backward(): the chunked kernel (forward.chunk_size tokens a
  // chunk), or the token-by-token recurrence (forward.chunk_size tokens between kept states).
  bool chunked = true;
};

}  // namespace deltacheck::kernels
