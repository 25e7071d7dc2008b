// Error metrics.
#include "harness/compare.h"

#include <cmath>

namespace deltacheck::harness {

Metrics measure(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                int64_t end) {
  Metrics m;
  double num = 0.0, den = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double ref = e[i];
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(ref));
    den += ref * ref;
    if (!std::isfinite(a[i])) {
      ++m.non_finite;
      if (std::isfinite(m.max_abs)) m.max_index = i;  // the first non-finite element
      m.max_abs = INFINITY;
      num = INFINITY;
      continue;
    }
    const double d = std::fabs(a[i] - ref);
    num += d * d;
    if (d > m.max_abs || m.max_index < 0) {
      m.max_abs = d;
      m.max_index = i;
    }
  }
  m.count = end - begin;
  m.rel_rms = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  m.nmse = m.rel_rms * m.rel_rms;
  return m;
}

int64_t first_token_over(const std::vector<double>& a, const std::vector<double>& e, int64_t begin,
                         int64_t end, int64_t per_token, double max_abs) {
  if (per_token <= 0) return -1;
  for (int64_t t = 0; begin + t * per_token < end; ++t)
    for (int64_t i = begin + t * per_token; i < begin + (t + 1) * per_token; ++i) {
      const double d = std::fabs(a[i] - e[i]);
      if (!(d <= max_abs)) return t;  // NaN counts as over
    }
  return -1;
}

std::vector<double> token_errors(const std::vector<double>& a, const std::vector<double>& e,
                                 int64_t begin, int64_t end, int64_t per_token) {
  std::vector<double> out;
  if (per_token <= 0) return out;
  for (int64_t i = begin; i < end; i += per_token) {
    double worst = 0.0;
    for (int64_t j = i; j < i + per_token; ++j) {
      const double d = std::fabs(a[j] - e[j]);
      worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
    }
    out.push_back(worst);
  }
  return out;
}

}  // namespace deltacheck::harness
