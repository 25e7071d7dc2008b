// FP64 gates of the gated delta rule: decay g from (a, A_log, dt_bias), update strength beta from
// b.
#include "reference/gates.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace deltacheck::reference {

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }

double sigmoid(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);  // exp(-x) could overflow here
  return e / (1.0 + e);
}

double silu(double x) { return x * sigmoid(x); }

GatesResult gates(const GatesArgs& args) {
  if (args.num_tokens < 0 || args.num_value_heads < 1)
    throw std::invalid_argument("gates: num_tokens must be >= 0 and num_value_heads >= 1");
  if (!args.a || !args.b || !args.A_log || !args.dt_bias)
    throw std::invalid_argument("gates: a, b, A_log and dt_bias are required");
  const int64_t T = args.num_tokens, HV = args.num_value_heads;
  GatesResult r;
  r.g.resize(static_cast<size_t>(T * HV));
  r.beta.resize(static_cast<size_t>(T * HV));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t i = t * HV + h;
      r.g[i] = -std::exp(args.A_log[h]) * softplus(args.a[i] + args.dt_bias[h]);
      r.beta[i] = sigmoid(args.b[i]);
    }
  }
  return r;
}

}  // namespace deltacheck::reference
