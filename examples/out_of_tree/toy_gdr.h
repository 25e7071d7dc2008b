// A toy gated delta rule kernel: the token-by-token recurrence on raw buffers, fp32 math, inputs
// in fp32 or bf16. It knows nothing about deltacheck; toy_gdr_test.cc checks it with deltacheck.
#pragma once

#include <cstdint>

namespace toy {

enum class Precision { kF32, kBF16 };  // of q, k, v, beta and o (bf16: raw uint16 bits)

struct GdrArgs {
  int64_t batch = 1, seq_len = 0;      // B, T
  int64_t heads = 1, value_heads = 1;  // H, HV (value head i uses q/k head i / (HV / H))
  int64_t key_dim = 0, value_dim = 0;  // K, V
  Precision precision = Precision::kF32;
  const void *q = nullptr, *k = nullptr;  // [B, T, H, K]
  const void* v = nullptr;                // [B, T, HV, V]
  const float* g = nullptr;               // [B, T, HV]
  const void* beta = nullptr;             // [B, T, HV]
  const int64_t* cu_seqlens = nullptr;    // [N + 1] (B = 1) or null (N = B)
  int64_t num_seqs = 0;
  const float* initial_state = nullptr;  // [N, HV, K, V] or null
  void* o = nullptr;                     // [B, T, HV, V]
  float* final_state = nullptr;          // [N, HV, K, V] or null
  float scale = 0.0f;
  bool l2norm = false;
};

// Returns false for arguments it cannot take.
bool recurrent_gdr(const GdrArgs& a);
// The padding-free bug: each packed sequence starts from the state the previous one ended with,
// as if cu_seqlens were not there (only the first sequence gets its own initial state).
bool leaky_recurrent_gdr(const GdrArgs& a);

}  // namespace toy
