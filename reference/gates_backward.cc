// FP64 backward of the gates: per token and value head, the chain rule through softplus and
// sigmoid; A_log and dt_bias gradients summed over the tokens in token order.
#include "reference/gates_backward.h"

#include <cmath>
#include <stdexcept>

namespace deltacheck::reference {

GatesGradients gates_backward(const GatesArgs& args, const double* dg, const double* dbeta) {
  if (!dg || !dbeta) throw std::invalid_argument("gates_backward: dg and dbeta are required");
  gates(GatesArgs{0, args.num_value_heads, args.a, args.b, args.A_log, args.dt_bias});  // checks
  if (args.num_tokens < 0) throw std::invalid_argument("gates_backward: num_tokens must be >= 0");
  const int64_t T = args.num_tokens, HV = args.num_value_heads;
  GatesGradients r;
  r.da.resize(static_cast<size_t>(T * HV));
  r.db.resize(static_cast<size_t>(T * HV));
  r.dA_log.assign(static_cast<size_t>(HV), 0.0);
  r.ddt_bias.assign(static_cast<size_t>(HV), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t i = t * HV + h;
      const double x = args.a[i] + args.dt_bias[h];
      const double rate = std::exp(args.A_log[h]);
      r.da[i] = -dg[i] * rate * sigmoid(x);
      r.ddt_bias[h] += r.da[i];
      r.dA_log[h] += -dg[i] * rate * softplus(x);  // dg/dA_log = g
      r.db[i] = dbeta[i] * sigmoid(args.b[i]) * sigmoid(-args.b[i]);
    }
  }
  return r;
}

}  // namespace deltacheck::reference
