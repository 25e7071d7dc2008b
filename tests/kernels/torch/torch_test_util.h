// Shared helpers for the LibTorch kernel tests: seeded test data (splitmix64, no std
// distributions, so every platform draws the same numbers) and comparisons against FP64 results.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace deltacheck::kernels::torch::test_util {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal by Box-Muller (one of the pair).
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// Values drawn by `draw`, stored as fp32 and rounded to `dtype` (the tensor the kernel sees).
template <typename Draw>
at::Tensor make_tensor(std::vector<int64_t> shape, at::ScalarType dtype, Draw draw) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(draw());
  return t.to(dtype);
}

// The exact values of a tensor as doubles (what the FP64 reference is fed or compared against).
inline std::vector<double> to_doubles(const at::Tensor& t) {
  at::Tensor d = t.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

struct Comparison {
  double rel_rms = 0;   // ||got - ref|| / ||ref||
  double max_abs = 0;   // max |got - ref|
  double ref_norm = 0;  // ||ref||, so a degenerate (all-zero) reference can fail a test
  bool finite = true;
};

inline Comparison compare(const at::Tensor& got, const std::vector<double>& ref) {
  const std::vector<double> g = to_doubles(got);
  Comparison c;
  EXPECT_EQ(g.size(), ref.size());
  if (g.size() != ref.size()) return c;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) c.finite = false;
    const double d = g[i] - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    c.max_abs = std::max(c.max_abs, std::abs(d));
  }
  c.ref_norm = std::sqrt(ref2);
  c.rel_rms = std::sqrt(diff2) / std::max(c.ref_norm, 1e-300);
  return c;
}

inline Comparison compare(const at::Tensor& got, const at::Tensor& ref) {
  return compare(got, to_doubles(ref));
}

inline at::Tensor cu_tensor(const std::vector<int64_t>& lengths, at::ScalarType dtype) {
  std::vector<int64_t> cu = {0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return at::tensor(cu, at::kLong).to(dtype);
}

inline std::vector<int64_t> cu_vector(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu = {0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

}  // namespace deltacheck::kernels::torch::test_util
