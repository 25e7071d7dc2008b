// FP64 backward of the gated RMS norm: every [V] vector on its own, dweight summed over them in
// order.
#include "reference/gated_rms_norm_backward.h"

#include <cmath>
#include <stdexcept>

#include "reference/gates.h"

namespace deltacheck::reference {

GatedRmsNormGradients gated_rms_norm_backward(const GatedRmsNormArgs& args, const double* dy) {
  if (!dy) throw std::invalid_argument("gated_rms_norm_backward: dy is required");
  GatedRmsNormArgs shape = args;
  shape.num_tokens = 0;
  gated_rms_norm(shape);  // the forward's checks
  if (args.num_tokens < 0)
    throw std::invalid_argument("gated_rms_norm_backward: num_tokens must be >= 0");
  const int64_t V = args.dim, rows = args.num_tokens * args.num_heads;
  GatedRmsNormGradients r;
  r.dx.resize(static_cast<size_t>(rows * V));
  r.dz.resize(static_cast<size_t>(rows * V));
  r.dweight.assign(static_cast<size_t>(V), 0.0);
  std::vector<double> gy(static_cast<size_t>(V));
  for (int64_t row = 0; row < rows; ++row) {
    const double* x = args.x + row * V;
    const double* z = args.z + row * V;
    const double* d = dy + row * V;
    double ss = 0.0;
    for (int64_t i = 0; i < V; ++i) ss += x[i] * x[i];
    const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(V) + args.eps);
    double x_dot_gy = 0.0;
    for (int64_t i = 0; i < V; ++i) {
      const double s = sigmoid(z[i]);
      const double x_hat = x[i] * inv_rms;
      gy[i] = d[i] * args.weight[i] * z[i] * s;
      x_dot_gy += x[i] * gy[i];
      r.dweight[i] += d[i] * x_hat * z[i] * s;
      r.dz[row * V + i] = d[i] * args.weight[i] * x_hat * s * (1.0 + z[i] * (1.0 - s));
    }
    const double c = inv_rms * inv_rms * inv_rms * x_dot_gy / static_cast<double>(V);
    for (int64_t i = 0; i < V; ++i) r.dx[row * V + i] = inv_rms * gy[i] - x[i] * c;
  }
  return r;
}

}  // namespace deltacheck::reference
