// The backward of the gated RMS norm (reference/gated_rms_norm.h) in FP64, per token and head,
// with r = 1 / sqrt(mean(x^2) + eps), x_hat = r x and gy = dy * w * silu(z):
//   dx = r gy - x r^3 (x . gy) / V,   dw += dy * x_hat * silu(z),   dz = dy * w * x_hat * silu'(z)
#pragma once

#include <vector>

#include "reference/gated_rms_norm.h"

namespace deltacheck::reference {

struct GatedRmsNormGradients {
  std::vector<double> dx;       // [T, HV, V]
  std::vector<double> dz;       // [T, HV, V]
  std::vector<double> dweight;  // [V], summed over tokens and heads
};

// dy: [T, HV, V], required. Throws std::invalid_argument when the problem is not valid.
GatedRmsNormGradients gated_rms_norm_backward(const GatedRmsNormArgs& args, const double* dy);

}  // namespace deltacheck::reference
