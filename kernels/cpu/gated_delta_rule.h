// CPU kernels for the gated delta rule: raw buffers in, no harness types.
//
// chunked_gated_delta_rule: the chunked (WY / UT-transform) form with fp32 accumulation; chunks
// never straddle a sequence boundary. recurrent_gated_delta_rule: the plain token-by-token
// recurrence in fp32 (an implementation under test like the chunked one; the tolerance
// baselines live in reference/ and share no code with these kernels).
#pragma once

#include <cstdint>

#include "kernels/common/half.h"
#include "kernels/common/status.h"

namespace deltacheck::kernels::cpu {

struct GatedDeltaRuleParams {
  int64_t batch = 1;            // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;          // T
  int64_t num_heads = 1;        // H
  int64_t num_value_heads = 1;  // HV, HV % H == 0 (value head i uses q/k head i / (HV / H))
  int64_t key_dim = 0;          // K
  int64_t value_dim = 0;        // V
  ScalarType dtype = ScalarType::kFloat32;  // of q, k, v, beta and o
  const void* q = nullptr;                  // [B, T, H, K]
  const void* k = nullptr;                  // [B, T, H, K]
  const void* v = nullptr;                  // [B, T, HV, V]
  const float* g = nullptr;                 // [B, T, HV] fp32 log-space decay
  const void* beta = nullptr;               // [B, T, HV]
  void* o = nullptr;                        // [B, T, HV, V]
  const int64_t* cu_seqlens = nullptr;      // [num_seqs + 1] or nullptr (num_seqs = B)
  int64_t num_seqs = 0;                     // used only with cu_seqlens
  // States are fp32 [rows, HV, K, V]. Sequence i reads row state_slots[i] (or i when state_slots
  // is nullptr) of initial_state, and writes the same row of final_state. A negative slot marks a
  // padding entry: nothing of it is read, written or computed. initial_state == final_state is
  // allowed (in place on a pool). initial_state nullptr: zero state; final_state nullptr: not kept.
  const float* initial_state = nullptr;
  float* final_state = nullptr;
  const int32_t* state_slots = nullptr;
  int64_t num_state_rows = 0;  // rows of the state buffers, for bounds checks (0: = num_seqs)
  float scale = 0.0f;          // <= 0: K^-0.5
  bool use_qk_l2norm = false;
  int64_t chunk_size = 64;
  int num_threads = 0;  // 0: all hardware threads
};

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p);
Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p);

}  // namespace deltacheck::kernels::cpu
