// The gated RMS norm that closes the linear-attention layer, in FP64, per token and value head:
//   y = w * x / sqrt(mean(x^2) + eps) * silu(z)
// over the value dimension V (Qwen3-Next's RMSNormGated: the weight is used as is, not as 1 + w).
#pragma once

#include <cstdint>
#include <vector>

namespace deltacheck::reference {

struct GatedRmsNormArgs {
  int64_t num_tokens = 0;          // T
  int64_t num_heads = 0;           // HV
  int64_t dim = 0;                 // V, the normalized dimension
  const double* x = nullptr;       // [T, HV, V]
  const double* z = nullptr;       // [T, HV, V], the gate
  const double* weight = nullptr;  // [V]
  double eps = 1e-6;
};

// Returns y [T, HV, V]. Throws std::invalid_argument when args do not describe a valid problem.
std::vector<double> gated_rms_norm(const GatedRmsNormArgs& args);

}  // namespace deltacheck::reference
