// CPU gated RMS norm, fp32 accumulation, per token and value head over V:
//   y = w * x / sqrt(mean(x^2) + eps) * silu(z)
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"

namespace deltacheck::kernels::cpu {

struct GatedRmsNormParams {
  int64_t num_tokens = 0;         // T
  int64_t num_heads = 0;          // HV
  int64_t dim = 0;                // V, the normalized dimension
  DType dtype = DType::kF32;      // of x, z and y
  const void* x = nullptr;        // [T, HV, V]
  const void* z = nullptr;        // [T, HV, V], the gate
  const float* weight = nullptr;  // [V]
  void* y = nullptr;              // [T, HV, V]; may alias x
  float eps = 1e-6f;
  int num_threads = 0;  // 0: all hardware threads
};

Status gated_rms_norm(const GatedRmsNormParams& p);

}  // namespace deltacheck::kernels::cpu
