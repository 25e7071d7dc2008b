// The gates of the gated delta rule in FP64, computed from the layer's projections:
//   g    = -exp(A_log[h]) * softplus(a + dt_bias[h])   (log-space decay, <= 0)
//   beta = sigmoid(b)
// plus the scalar activations they are made of, which the convolution and the output norm share.
#pragma once

#include <cstdint>
#include <vector>

namespace deltacheck::reference {

// log(1 + exp(x)) without overflow for large x or loss of precision for very negative x.
double softplus(double x);
// 1 / (1 + exp(-x)) without overflow on either side.
double sigmoid(double x);
// x * sigmoid(x).
double silu(double x);

struct GatesArgs {
  int64_t num_tokens = 0;           // T (any leading dimensions flattened)
  int64_t num_value_heads = 0;      // HV
  const double* a = nullptr;        // [T, HV]
  const double* b = nullptr;        // [T, HV]
  const double* A_log = nullptr;    // [HV]
  const double* dt_bias = nullptr;  // [HV]
};

struct GatesResult {
  std::vector<double> g;     // [T, HV]
  std::vector<double> beta;  // [T, HV]
};

// Throws std::invalid_argument when args do not describe a valid problem.
GatesResult gates(const GatesArgs& args);

}  // namespace deltacheck::reference
