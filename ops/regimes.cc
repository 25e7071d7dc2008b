// The regimes the rule's ops share (regimes.h): the parameter, the q/k norm ranges and the
// correlated keys, with our own exp/log (cases/det_math.h): the same bits on every machine.
#include "ops/regimes.h"

#include <cmath>

#include "cases/det_math.h"
#include "ops/decode.h"

namespace deltacheck::ops {

ParamSpec regime_param(const std::vector<Regime>& allowed, std::string help) {
  std::vector<std::string> names;
  for (Regime r : allowed) names.emplace_back(name(r));
  ParamSpec p = choice("regime", "rand", std::move(names), std::move(help));
  p.absent_by_default = true;
  return p;
}

Regime decode_regime(const cases::Case& c) {
  return c.has("regime") ? decode_choice<Regime>(c, "regime", kRegimeNames) : Regime::kRand;
}

double qk_token_norm(Regime regime, const cases::Stream& st, uint64_t i) {
  if (regime != Regime::kTinyQK && regime != Regime::kHugeQK) return 0.0;
  const bool tiny = regime == Regime::kTinyQK;
  const double lo = cases::det_log(tiny ? kTinyNormMin : kHugeNormMin);
  const double hi = cases::det_log(tiny ? kTinyNormMax : kHugeNormMax);
  return cases::det_exp(lo + (hi - lo) * st.uniform(i));
}

void correlate_key(const cases::Stream& base_stream, uint64_t first, int64_t n, double* row) {
  const double a = std::sqrt(kCorrKCosine), b = std::sqrt(1.0 - kCorrKCosine);
  for (int64_t i = 0; i < n; ++i)
    row[i] = a * base_stream.normal(first + static_cast<uint64_t>(i)) + b * row[i];
}

}  // namespace deltacheck::ops
