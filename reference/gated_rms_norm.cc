// FP64 gated RMS norm: every [V] vector normalized on its own, scaled by w and gated by silu(z).
#include "reference/gated_rms_norm.h"

#include <cmath>
#include <stdexcept>

#include "reference/gates.h"

namespace deltacheck::reference {

std::vector<double> gated_rms_norm(const GatedRmsNormArgs& args) {
  if (args.num_tokens < 0 || args.num_heads < 1 || args.dim < 1)
    throw std::invalid_argument("gated_rms_norm: num_tokens must be >= 0, num_heads and dim >= 1");
  if (!args.x || !args.z || !args.weight)
    throw std::invalid_argument("gated_rms_norm: x, z and weight are required");
  if (!(args.eps >= 0.0)) throw std::invalid_argument("gated_rms_norm: eps must be >= 0");
  const int64_t V = args.dim, rows = args.num_tokens * args.num_heads;
  std::vector<double> y(static_cast<size_t>(rows * V));
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = args.x + r * V;
    const double* z = args.z + r * V;
    double ss = 0.0;
    for (int64_t i = 0; i < V; ++i) ss += x[i] * x[i];
    const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(V) + args.eps);
    for (int64_t i = 0; i < V; ++i) y[r * V + i] = args.weight[i] * x[i] * inv_rms * silu(z[i]);
  }
  return y;
}

}  // namespace deltacheck::reference
