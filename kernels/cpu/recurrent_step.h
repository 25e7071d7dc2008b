// One token of the gated delta rule on a fp32 state [K][V], shared by the CPU kernels that step
// token by token (gated_delta_rule.cc's recurrent lanes, recurrent_decode.cc).
#pragma once

#include <cstdint>

namespace deltacheck::kernels::cpu {

// S <- decay * S; u = beta * (v - S^T k); S <- S + k u^T; o = S^T q. The rule's four steps fused
// into two passes over the rows of S; every element sees the same operations in the same order as
// four separate passes would apply. `u` is scratch of V floats; `v` may be `o` (it is read before
// o is written).
inline void recurrent_step(float* S, const float* q, const float* k, const float* v, float decay,
                           float beta, int64_t K, int64_t V, float* u, float* o) {
  // Pass 1: S <- decay * S and u = S^T k, row by row.
  for (int64_t j = 0; j < V; ++j) u[j] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    float* Si = S + i * V;
    const float ki = k[i];
    for (int64_t j = 0; j < V; ++j) {
      Si[j] *= decay;
      u[j] += Si[j] * ki;
    }
  }
  for (int64_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
  // Pass 2: S <- S + k u^T and o = S^T q on the updated rows.
  for (int64_t j = 0; j < V; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    float* Si = S + i * V;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < V; ++j) {
      Si[j] += ki * u[j];
      o[j] += Si[j] * qi;
    }
  }
}

}  // namespace deltacheck::kernels::cpu
