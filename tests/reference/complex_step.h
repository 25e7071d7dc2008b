// Shared by the backward cross-checks (test_gdr_backward.cc, test_layer_backward.cc): complex-step
// differentiation, the gated delta rule's token step written apart from reference/ and templated
// on the scalar type, and the comparison of gradient tensors. For an analytic loss L,
// dL/dx = Im L(x + i h e_x) / h has no subtractive cancellation, so with h = 1e-20 it is exact to
// rounding. Written with x * x (never |x|^2, which is not analytic).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace deltacheck::test_support {

using Complex = std::complex<double>;

inline std::vector<Complex> lift(const std::vector<double>& x) {
  return std::vector<Complex>(x.begin(), x.end());
}

// d loss / d x[i] for every i, one complex evaluation of loss() per element of x (which loss
// reads).
template <typename Loss>
std::vector<double> complex_step_gradient(std::vector<Complex>& x, const Loss& loss) {
  constexpr double h = 1e-20;
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] += Complex(0, h);
    d[i] = loss().imag() / h;
    x[i] -= Complex(0, h);
  }
  return d;
}

// x / sqrt(sum(x^2) + 1e-6), in place.
template <typename T>
void l2_normalize(std::vector<T>& x) {
  T ss = T(0);
  for (const T& e : x) ss += e * e;
  const T inv = T(1) / std::sqrt(ss + T(1e-6));
  for (T& e : x) e *= inv;
}

// One token of the rule on S ([K][V]) with normalized q, k: S <- exp(g) S; u = beta (v - S^T k);
// S += k u^T; o = S^T (scale q).
template <typename T>
void delta_rule_token(std::vector<T>& S, const std::vector<T>& qn, const std::vector<T>& kn,
                      const T* v, T g, T beta, double scale, int64_t K, int64_t V, T* o) {
  const T a = std::exp(g);
  for (T& e : S) e *= a;
  for (int64_t j = 0; j < V; ++j) {
    T sk = T(0);
    for (int64_t i = 0; i < K; ++i) sk += S[i * V + j] * kn[i];
    const T u = beta * (v[j] - sk);
    for (int64_t i = 0; i < K; ++i) S[i * V + j] += kn[i] * u;
  }
  for (int64_t j = 0; j < V; ++j) {
    o[j] = T(0);
    for (int64_t i = 0; i < K; ++i) o[j] += S[i * V + j] * (T(scale) * qn[i]);
  }
}

// The largest |a - b| of each tensor relative to its largest |b|; the worst over the tensors and
// which one it was (NaN counts as worst).
struct Disagreement {
  double worst = 0.0;
  std::string tensor;
  void add(const std::string& name, const std::vector<double>& x, const std::vector<double>& y) {
    EXPECT_EQ(x.size(), y.size()) << name;
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      diff = std::max(diff, std::abs(x[i] - y[i]));
      mag = std::max(mag, std::abs(y[i]));
    }
    const double rel = diff / std::max(mag, std::numeric_limits<double>::min());
    if (!(rel <= worst)) worst = rel, tensor = name;
  }
};

}  // namespace deltacheck::test_support
