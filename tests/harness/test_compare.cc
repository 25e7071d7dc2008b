// Error metrics (harness/compare.h): the definition, checked against a plain element-by-element
// computation written here, and the typed-tensor measure, which must give the same bits as the
// measure of the tensor's values converted to double (the fast path of every judged case).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cases/tensor.h"
#include "harness/compare.h"

namespace deltacheck::harness {
namespace {

using cases::DType;
using cases::Tensor;

// Long enough for several blocks of the threaded measure (2^17 elements each) and a tail.
constexpr int64_t kN = (int64_t{1} << 20) + 37;

// A deterministic expectation and an actual close to it, as a kernel would produce.
std::vector<double> expectation(int64_t n) {
  std::vector<double> e(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e[i] = (static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5) * 4.0;
  }
  return e;
}

Tensor as_tensor(DType t, const std::vector<double>& values) {
  Tensor out("o", t, {static_cast<int64_t>(values.size())}, 64);
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, values[i] * (1.0 + 1e-6 * ((i % 7) - 3)));
  return out;
}

// The definition, one element at a time.
Metrics plain(const std::vector<double>& a, const std::vector<double>& e, int64_t b, int64_t n) {
  Metrics m;
  long double num = 0, den = 0;
  for (int64_t i = b; i < n; ++i) {
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(e[i]));
    den += static_cast<long double>(e[i]) * e[i];
    if (!std::isfinite(a[i])) {
      if (m.non_finite++ == 0) m.max_index = i, m.max_abs = INFINITY;
      num = INFINITY;
      continue;
    }
    const double d = std::fabs(a[i] - e[i]);
    num += static_cast<long double>(d) * d;
    if (m.non_finite == 0 && (d > m.max_abs || m.max_index < 0)) m.max_abs = d, m.max_index = i;
  }
  m.count = n - b;
  m.rel_rms = den > 0 ? static_cast<double>(std::sqrt(num / den)) : static_cast<double>(num);
  return m;
}

void expect_same_bits(const Metrics& x, const Metrics& y, const char* what) {
  EXPECT_EQ(std::memcmp(&x.max_abs, &y.max_abs, sizeof(double)), 0) << what;
  EXPECT_EQ(x.max_index, y.max_index) << what;
  EXPECT_EQ(std::memcmp(&x.rel_rms, &y.rel_rms, sizeof(double)), 0) << what;
  EXPECT_EQ(x.ref_max_abs, y.ref_max_abs) << what;
  EXPECT_EQ(x.count, y.count) << what;
  EXPECT_EQ(x.non_finite, y.non_finite) << what;
}

void expect_definition(const Metrics& m, const Metrics& want) {
  EXPECT_EQ(m.max_abs, want.max_abs);
  EXPECT_EQ(m.max_index, want.max_index);
  EXPECT_EQ(m.ref_max_abs, want.ref_max_abs);
  EXPECT_EQ(m.count, want.count);
  EXPECT_EQ(m.non_finite, want.non_finite);
  if (std::isfinite(want.rel_rms))
    EXPECT_NEAR(m.rel_rms, want.rel_rms, 1e-12 * want.rel_rms);
  else
    EXPECT_EQ(m.rel_rms, want.rel_rms);
}

class TypedMeasure : public ::testing::TestWithParam<DType> {};

TEST_P(TypedMeasure, SameBitsAsTheDoubleValuesAndTheDefinition) {
  std::vector<double> e = expectation(kN);
  Tensor t = as_tensor(GetParam(), e);
  // Ranges: everything, an unaligned slice across blocks, one element, nothing.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, kN}, {5, kN - 3}, {300000, 300001}, {7, 7}};
  auto check = [&](const char* what) {
    const std::vector<double> a = t.to_double();
    for (const auto& [b, n] : ranges) {
      SCOPED_TRACE(::testing::Message() << what << " [" << b << ", " << n << ")");
      const Metrics typed = measure(t, e, b, n), values = measure(a, e, b, n);
      expect_same_bits(typed, values, what);
      set_portable_measure(true);  // the two-lane loop of machines without AVX2
      const Metrics portable = measure(t, e, b, n);
      set_portable_measure(false);
      expect_same_bits(portable, typed, what);
      expect_definition(typed, plain(a, e, b, n));
    }
  };
  check("close");
  // The largest |Δ| twice, in different blocks (exactly 3 in every dtype): the first is reported.
  e[600000] = e[900000] = 0.25;
  t.set(600000, 3.25);
  t.set(900000, 3.25);
  t.set(100, e[100] - 1.5);
  check("ties");
  EXPECT_EQ(measure(t, e, 0, kN).max_index, 600000);
  EXPECT_EQ(measure(t, e, 700000, kN).max_index, 900000);
  // Ties inside one block, the earlier element in a later lane (index 6: lane 2, index 9:
  // lane 1), and in the block's tail after the lanes.
  e[6] = e[9] = e[kN - 1] = 0.25;
  t.set(6, 3.5);
  t.set(9, 3.5);
  t.set(kN - 1, 3.5);
  check("ties across lanes");
  EXPECT_EQ(measure(t, e, 0, kN).max_index, 6);
  EXPECT_EQ(measure(t, e, 7, kN).max_index, 9);
  EXPECT_EQ(measure(t, e, 10, kN).max_index, kN - 1);
  // Ties in different spans of one block: the largest |Δ| is looked for only in the first span
  // that holds it, which must be the earlier one.
  e[140000] = e[150000] = 0.25;
  t.set(140000, 3.5);
  t.set(150000, 3.5);
  check("ties across spans");
  EXPECT_EQ(measure(t, e, 10, kN).max_index, 140000);
  EXPECT_EQ(measure(t, e, 140001, kN).max_index, 150000);
  // Non-finite values: the first one is the location, whatever the |Δ| elsewhere.
  t.set(800000, std::numeric_limits<double>::infinity());
  t.set(700001, std::nan(""));
  check("non-finite");
  const Metrics m = measure(t, e, 0, kN);
  EXPECT_EQ(m.non_finite, 2);
  EXPECT_EQ(m.max_index, 700001);
  EXPECT_TRUE(std::isinf(m.max_abs));
  EXPECT_TRUE(std::isinf(m.rel_rms));
  // A poisoned (never written) tensor is all NaN: every element non-finite.
  t.poison();
  check("poisoned");
  EXPECT_EQ(measure(t, e, 0, kN).non_finite, kN);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TypedMeasure,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16, DType::kF64),
                         [](const auto& info) {
                           return std::string(cases::dtype_name(info.param));
                         });

TEST(Measure, SeveralTensorsInOnePassGiveEachItsOwnBits) {
  // A judge measures all outputs of a case at once (their blocks share the threads): each result
  // must be the one measure() gives alone, whatever the dtypes, sizes and ranges next to it.
  const std::vector<double> e = expectation(kN), small = expectation(1000);
  Tensor f32 = as_tensor(DType::kF32, e), bf16 = as_tensor(DType::kBF16, small);
  Tensor f64 = as_tensor(DType::kF64, e), nan = as_tensor(DType::kF16, small);
  f32.set(12345, 7.0);
  nan.set(17, std::nan(""));
  const std::vector<MeasureRequest> requests = {{&f32, &e, 0, kN},     {&bf16, &small, 0, 1000},
                                                {&f64, &e, 5, kN - 3}, {&nan, &small, 0, 1000},
                                                {&f32, &e, 7, 7},      {&bf16, &small, 999, 1000}};
  const std::vector<Metrics> together = measure_each(requests);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const MeasureRequest& r = requests[i];
    SCOPED_TRACE(::testing::Message() << "request " << i);
    expect_same_bits(together[i], measure(*r.actual, *r.expected, r.begin, r.end), "together");
  }
  EXPECT_EQ(together[0].max_index, 12345);
  EXPECT_EQ(together[3].non_finite, 1);
  EXPECT_EQ(together[4].count, 0);
  EXPECT_TRUE(measure_each({}).empty());
}

TEST(Measure, AnOverflowingDifferenceNeverLooksSmall) {
  std::vector<double> e = {1.0, -1e300, 2.0, 3.0, 4.0};
  std::vector<double> a = {1.0, 1e300, 2.0, 3.0, 4.5};
  const Metrics m = measure(a, e, 0, 5);
  EXPECT_EQ(m.non_finite, 0);
  EXPECT_EQ(m.max_index, 1);
  EXPECT_EQ(m.max_abs, 2e300);
  EXPECT_FALSE(m.rel_rms <= 1.0) << m.rel_rms;  // the squares overflow: inf / inf is NaN
}

TEST(Measure, EqualValuesAreExactlyZeroAndLocatedAtTheStart) {
  const std::vector<double> e = expectation(1000);
  const Metrics m = measure(e, e, 10, 1000);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.rel_rms, 0.0);
  EXPECT_EQ(m.max_index, 10);
}

}  // namespace
}  // namespace deltacheck::harness
