// CPU gates of the gated delta rule, fp32: g = -exp(A_log[h]) * softplus(a + dt_bias[h]) and
// beta = sigmoid(b). As in FLA's fused gating, g comes out fp32 and beta in the input dtype, the
// form the gated delta rule kernels take them in.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"

namespace deltacheck::kernels::cpu {

struct GatesParams {
  int64_t num_tokens = 0;          // T (any leading dimensions flattened)
  int64_t num_value_heads = 0;     // HV
  DType dtype = DType::kF32;       // of a, b and beta
  const void* a = nullptr;         // [T, HV]
  const void* b = nullptr;         // [T, HV]
  const float* A_log = nullptr;    // [HV]
  const float* dt_bias = nullptr;  // [HV]
  float* g = nullptr;              // [T, HV] fp32
  void* beta = nullptr;            // [T, HV]
  int num_threads = 0;             // 0: all hardware threads
};

Status gates(const GatesParams& p);

}  // namespace deltacheck::kernels::cpu
