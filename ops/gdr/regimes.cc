// The gdr regimes (regimes.h): the rules a regime puts on the other
// parameters, and converged memory's FP64 recurrence (deterministic: our own exp, no FMA
// contraction, a fixed summation order; no code shared with the kernels or the reference).
#include "ops/gdr/regimes.h"

#include <cmath>
#include <vector>

#include "cases/det_math.h"
#include "ops/repack.h"
#include "ops/schema.h"

namespace deltacheck::ops::gdr {

std::string check_regime(const Params& d) {
  if (d.regime == Regime::kConverged) {
    if (d.gate != Gate::kZero)
      return "regime=converged needs gate=zero (v follows the memory's prediction, so a decaying "
             "memory drains and v with it)";
    if (d.state != State::kRand)
      return "regime=converged needs state=rand (v is predicted from the state; a zero state "
             "predicts 0)";
    if (d.cache == Cache::kNone || d.pooled() || d.serving())
      return "regime=converged needs cache prefill, decode, chunked or dynamic (its states start "
             "from initial_state)";
  }
  if ((d.regime == Regime::kTinyQK || d.regime == Regime::kHugeQK) && !d.l2)
    return std::string("regime=") + name(d.regime) +
           " needs l2=1 (q/k norms are the in-kernel L2 norm's input)";
  return "";
}

void converge_values(const Params& d, const GenOptions& o, TensorMap& m) {
  const Tensor& k = m.at("k");
  const Tensor& g = m.at("g");
  const Tensor& beta = m.at("beta");
  const Tensor& s0 = m.at("initial_state");
  Tensor& v = m.at("v");
  const int64_t K = d.K, V = d.V, HV = d.HV, group = d.HV / d.H, per = HV * K * V;
  const double f = kConvergedResidual, stretch = f / std::sqrt(1.0 - f * f);
  std::vector<double> S(static_cast<size_t>(K * V)), kn(static_cast<size_t>(K)),
      p(static_cast<size_t>(V)), z(static_cast<size_t>(V));
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream sv = sequence_stream(d.seed, o, "v", s);
    const int64_t len = d.layout.lengths[s], base = token_row(d.layout, s, 0);
    for (int64_t h = 0; h < HV; ++h) {
      for (int64_t i = 0; i < K * V; ++i) S[i] = s0.get(s * per + h * K * V + i);
      for (int64_t tok = 0; tok < len; ++tok) {
        const int64_t row = base + tok;
        // k as the kernel sees it: rounded to the dtype, then L2-normalized when l2=1.
        double ss = 0.0;
        for (int64_t i = 0; i < K; ++i) {
          kn[i] = k.get((row * d.H + h / group) * K + i);
          ss += kn[i] * kn[i];
        }
        const double inv = d.l2 ? 1.0 / std::sqrt(ss + 1e-6) : 1.0;
        for (int64_t i = 0; i < K; ++i) kn[i] *= inv;
        const double decay = cases::det_exp(g.get(row * HV + h));
        for (int64_t i = 0; i < K * V; ++i) S[i] *= decay;
        // p = S^T k, the prediction; the residual r: a random direction orthogonal to p with
        // |r| = f |p + r|.
        double pp = 0.0, zp = 0.0, zz = 0.0;
        for (int64_t j = 0; j < V; ++j) p[j] = 0.0;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) p[j] += S[i * V + j] * kn[i];
        const uint64_t first = static_cast<uint64_t>((tok * HV + h) * V);
        for (int64_t j = 0; j < V; ++j) {
          z[j] = sv.normal(first + static_cast<uint64_t>(j));
          pp += p[j] * p[j];
          zp += z[j] * p[j];
        }
        for (int64_t j = 0; j < V; ++j) {
          if (pp > 0.0) z[j] -= zp / pp * p[j];
          zz += z[j] * z[j];
        }
        const double r = zz > 0.0 ? stretch * std::sqrt(pp / zz) : 0.0;
        const double b = beta.get(row * HV + h);
        for (int64_t j = 0; j < V; ++j) {
          const int64_t at = (row * HV + h) * V + j;
          v.set(at, static_cast<float>(p[j] + r * z[j]));
          p[j] = b * (v.get(at) - p[j]);  // u, from v as stored
        }
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) S[i * V + j] += kn[i] * p[j];
      }
    }
  }
}

}  // namespace deltacheck::ops::gdr
