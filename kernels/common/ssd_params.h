// Mamba2's SSD forward problem on raw buffers (kernels/cpu/ssd.h). The semantics are
// docs/semantics.md, "Mamba2 SSD"; reference/ssd.h computes them in FP64.
#pragma once

#include <cstdint>
#include <limits>

#include "core/dtype.h"

namespace deltacheck::kernels {

struct SsdParams {
  int64_t batch = 1;                     // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;                   // T
  int64_t num_heads = 1;                 // H
  int64_t head_dim = 0;                  // P
  int64_t num_groups = 1;                // G, H % G == 0 (head h reads group h / (H / G))
  int64_t state_dim = 0;                 // N (d_state)
  DType dtype = DType::kF32;             // of x, dt, B, C, z and y
  const void* x = nullptr;               // [B, T, H, P]
  const void* dt = nullptr;              // [B, T, H], raw
  const void* B = nullptr;               // [B, T, G, N]
  const void* C = nullptr;               // [B, T, G, N]
  const void* z = nullptr;               // [B, T, H, P] or nullptr (no gate)
  const float* dt_bias = nullptr;        // [H] or nullptr
  const float* A = nullptr;              // [H], A = -exp(A_log)
  const float* D = nullptr;              // [H] or nullptr (no skip)
  void* y = nullptr;                     // [B, T, H, P]
  const int64_t* cu_seqlens = nullptr;   // [num_seqs + 1] or nullptr (num_seqs = B)
  int64_t num_seqs = 0;                  // used only with cu_seqlens
  const float* initial_state = nullptr;  // fp32 [num_seqs, H, P, N]; nullptr: zeros
  float* final_state = nullptr;          // fp32 [num_seqs, H, P, N]; nullptr: not kept
  bool dt_softplus = true;
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();  // dt_limit
  int64_t chunk_size = 64;  // the chunked kernel's chunk (a tile of it fits in L1)
  int num_threads = 0;      // 0 = all hardware threads
};

}  // namespace deltacheck::kernels
