// Deterministic exp / log: range reduction by powers of two and fixed polynomials.
#include "cases/det_math.h"

#include <cmath>

namespace deltacheck::cases {

double det_exp(double x) {
  if (x > 709.0) return HUGE_VAL;
  if (x < -745.0) return 0.0;
  // x = k ln2 + r, |r| <= ln2 / 2; ln2 split in a high part with trailing zeros and a low part.
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const double k = std::floor(x * 1.4426950408889634 + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  // Taylor series to r^14 / 14!: error below 1e-17 for |r| <= 0.35.
  double p = 1.0;
  for (int n = 14; n >= 1; --n) p = 1.0 + p * r / n;
  return std::ldexp(p, static_cast<int>(k));  // exact scaling (ldexp is exact)
}

double det_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -HUGE_VAL : NAN;
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): exact
  if (m < 0.70710678118654752) {
    m *= 2.0;
    e -= 1;
  }
  // log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: series to s^27.
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 0.0;
  for (int n = 27; n >= 1; n -= 2) p = 1.0 / n + s2 * p;
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  return e * kLn2Hi + (2.0 * s * p + e * kLn2Lo);
}

namespace {
// log(1 + y) for y >= 0 without the cancellation of forming 1 + y when y is tiny.
double det_log1p(double y) {
  if (y > 0.4) return det_log(1.0 + y);
  const double s = y / (2.0 + y), s2 = s * s;  // log(1 + y) = 2 atanh(y / (2 + y))
  double p = 0.0;
  for (int n = 31; n >= 1; n -= 2) p = 1.0 / n + s2 * p;
  return 2.0 * s * p;
}
}  // namespace

double det_log_sigmoid(double x) {
  // log(sigmoid(x)) = -log(1 + exp(-x)) for x >= 0, and x - log(1 + exp(x)) for x < 0.
  if (x >= 0.0) return -det_log1p(det_exp(-x));
  return x - det_log1p(det_exp(x));
}

}  // namespace deltacheck::cases
