// The rounding-bias check (harness/tolerance.h, docs/tolerance.md#rounding-bias): the sign counts
// measure() takes, the rule on synthetic outputs (stored to nearest even: no bias; truncated or
// rounded up: biased; a coherent error of a correct kernel: no bias), and the verdicts of the
// wrong:*-store backends and the cpu backend on the gate's bf16 / fp16 gdr cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/suites.h"
#include "core/half.h"
#include "harness/compare.h"
#include "harness/runner.h"
#include "harness/tolerance.h"
#include "tests/splitmix64.h"

namespace deltacheck::harness {
namespace {

using cases::DType;

// n expectations spread over six binades of both signs, as outputs are.
std::vector<double> expectations(int64_t n, uint64_t seed) {
  test_support::SplitMix64 rng{seed};
  std::vector<double> e(static_cast<size_t>(n));
  for (double& x : e) x = std::ldexp(rng.uniform(-1.0, 1.0), static_cast<int>(rng.next() % 6) - 3);
  return e;
}

// x as bf16 stores it: to nearest even, toward zero (the high half of the fp32 bits), or up.
enum class Rounding { kNearest, kTowardZero, kUp };
double bf16(double x, Rounding r) {
  const float f = static_cast<float>(x);
  if (r == Rounding::kNearest) return bf16_to_float(float_to_bf16(f));
  const float z = bits_float(float_bits(f) & 0xffff0000u);
  if (r == Rounding::kTowardZero || z == f || f < 0) return z;
  return bits_float(float_bits(z) + 0x10000u);
}

std::vector<double> stored(const std::vector<double>& e, Rounding r, double scale = 1.0) {
  std::vector<double> a(e.size());
  for (size_t i = 0; i < e.size(); ++i) a[i] = bf16(e[i] * scale, r);
  return a;
}

// The check on a whole synthetic output, in rows of `row` elements.
RoundingBias bias_of(DType t, const std::vector<double>& a, const std::vector<double>& e,
                     int64_t row = 64) {
  const int64_t n = static_cast<int64_t>(e.size());
  return rounding_bias(t, error_signs(a, e, 0, n, row), measure(a, e, 0, n));
}

TEST(RoundingBias, ErrorSignsCountElementsAndRows) {
  std::vector<double> e = expectations(4099, 1);  // a last row of 3
  std::vector<double> a = stored(e, Rounding::kNearest);
  e[7] = a[7];   // no error: counted nowhere
  a[100] = NAN;  // not finite: counted nowhere
  int64_t toward = 0, away = 0, up = 0, down = 0, zero_sq = 0, rows = 0;
  for (size_t r = 0; r < e.size(); r += 64) {
    int64_t d = 0, any = 0;
    for (size_t i = r; i < std::min(e.size(), r + 64); ++i) {
      const double x = a[i] - e[i];
      up += x > 0, down += x < 0, any += x != 0 && !std::isnan(x);
      const bool t = (x < 0 && e[i] > 0) || (x > 0 && e[i] < 0);
      const bool w = (x > 0 && e[i] > 0) || (x < 0 && e[i] < 0);
      toward += t, away += w, d += t - w;
    }
    zero_sq += d * d, rows += any > 0;
  }
  const ErrorSigns s = error_signs(a, e, 0, 4099, 64);
  EXPECT_EQ(s.toward_zero, toward);
  EXPECT_EQ(s.away_from_zero, away);
  EXPECT_EQ(s.up, up);
  EXPECT_EQ(s.down, down);
  EXPECT_EQ(s.zero_sq, zero_sq);
  EXPECT_EQ(s.rows, rows);
  EXPECT_EQ(s.rows, 65);
  EXPECT_EQ(s.toward_zero + s.away_from_zero, 4097);
  // A bf16 tensor holding the same values counts the same; a range starting mid-row counts the
  // rest of that row as one.
  cases::Tensor t("o", DType::kBF16, {4099});
  for (int64_t i = 0; i < 4099; ++i) t.set(i, a[i]);
  const ErrorSigns ts = error_signs(t, e, 0, 4099, 64);
  EXPECT_EQ(ts.toward_zero, toward);
  EXPECT_EQ(ts.up, up);
  EXPECT_EQ(ts.zero_sq, zero_sq);
  EXPECT_EQ(ts.rows, rows);
  EXPECT_EQ(error_signs(t, e, 32, 160, 64).rows, 3);
}

TEST(RoundingBias, NearestEvenIsUnbiasedTruncationAndRoundingUpAreBiased) {
  const std::vector<double> e = expectations(8192, 2);
  const RoundingBias nearest = bias_of(DType::kBF16, stored(e, Rounding::kNearest), e);
  EXPECT_TRUE(nearest.checked);
  EXPECT_FALSE(nearest.biased);
  EXPECT_LT(nearest.fraction, 0.53);
  EXPECT_LT(nearest.z, 3.0);

  const RoundingBias truncated = bias_of(DType::kBF16, stored(e, Rounding::kTowardZero), e);
  EXPECT_TRUE(truncated.biased);
  EXPECT_EQ(truncated.direction, BiasDirection::kTowardZero);
  EXPECT_GT(truncated.fraction, 0.99);
  EXPECT_NEAR(truncated.z, std::sqrt(128.0), 0.5) << "z = sqrt(rows) when every row shrinks";
  EXPECT_EQ(truncated.rows, 128);
  EXPECT_EQ(describe_bias(truncated, "bf16", "o").rfind("bf16 o biased toward zero: 100% of ", 0),
            0u)
      << describe_bias(truncated, "bf16", "o");

  const RoundingBias up = bias_of(DType::kBF16, stored(e, Rounding::kUp), e);
  EXPECT_TRUE(up.biased);
  EXPECT_EQ(up.direction, BiasDirection::kUp);
  EXPECT_GT(up.fraction, 0.99);
  // Away from zero (both signs grow) is the mirror of truncation.
  std::vector<double> away = stored(e, Rounding::kTowardZero);
  for (size_t i = 0; i < e.size(); ++i) away[i] = 2 * e[i] - away[i];
  const RoundingBias grows = bias_of(DType::kBF16, away, e);
  EXPECT_TRUE(grows.biased);
  EXPECT_EQ(grows.direction, BiasDirection::kAwayFromZero);
}

// A correct kernel's arithmetic error is coherent (one rounding of a state moves many outputs
// together): an fp32 output shrunk by 1e-7 everywhere shrinks in every element, and is not
// judged (fp32 is not checked); the same error before a bf16 store moves 2e-5 of the elements.
// The fraction threshold allows coherent errors up to ~1/4 of a bf16 half-ulp.
TEST(RoundingBias, CoherentErrorsOfCorrectKernelsDoNotFire) {
  const std::vector<double> e = expectations(1 << 16, 3);
  std::vector<double> fp32(e.size());
  for (size_t i = 0; i < e.size(); ++i) fp32[i] = static_cast<float>(e[i] * (1 - 1e-7));
  const int64_t n = static_cast<int64_t>(e.size());
  const ErrorSigns s = error_signs(fp32, e, 0, n, 64);
  EXPECT_GT(s.toward_zero, s.away_from_zero * 4) << "the coherent error shows in fp32";
  EXPECT_FALSE(rounding_bias(DType::kF32, s, measure(fp32, e, 0, n)).checked);

  const RoundingBias small = bias_of(DType::kBF16, stored(e, Rounding::kNearest, 1 - 1e-7), e);
  EXPECT_FALSE(small.biased);
  EXPECT_LT(small.fraction, 0.51);
  // 5e-4 relative, a bf16 kernel's whole error budget moved one way: still not biased.
  const RoundingBias budget = bias_of(DType::kBF16, stored(e, Rounding::kNearest, 1 - 5e-4), e);
  EXPECT_FALSE(budget.biased) << budget.fraction << " z " << budget.z;
  EXPECT_GT(budget.z, 6.0) << "the z-score alone would fire: the fraction is what holds";
  // Where the fraction holds no more: ~0.5 + 192 x the shift (1 / bf16's relative ulp on
  // average), so about 1.3e-3.
  const RoundingBias edge = bias_of(DType::kBF16, stored(e, Rounding::kNearest, 1 - 2e-3), e);
  EXPECT_TRUE(edge.biased) << edge.fraction;
  std::printf("  coherent shift 5e-4: %.1f%% z %.1f; 2e-3: %.1f%% z %.1f\n", 100 * budget.fraction,
              budget.z, 100 * edge.fraction, edge.z);

  // Each row of 64 shifted together by 3e-3 (about a bf16 half-ulp), up or down at random, as
  // one rounding of a head's scalar factor does: 1024 rows, most of each row one way, so the
  // elements alone would give z ~ 40. Counted by rows it is chance.
  test_support::SplitMix64 rng{6};
  std::vector<double> rows(e.size());
  for (size_t r = 0; r < e.size(); r += 64) {
    const double scale = rng.next() % 2 ? 1 + 3e-3 : 1 - 3e-3;
    for (size_t i = r; i < r + 64; ++i) rows[i] = bf16(e[i] * scale, Rounding::kNearest);
  }
  const RoundingBias by_row = bias_of(DType::kBF16, rows, e);
  EXPECT_FALSE(by_row.biased) << by_row.fraction << " z " << by_row.z;
  EXPECT_LT(by_row.z, 4.0);
  std::printf("  rows moved by 3e-3: %.1f%% z %.2f over %lld rows\n", 100 * by_row.fraction,
              by_row.z, static_cast<long long>(by_row.rows));
  const std::vector<double> row0(rows.begin(), rows.begin() + 64), e0(e.begin(), e.begin() + 64);
  const RoundingBias by_element = bias_of(DType::kBF16, row0, e0, /*row=*/1);
  EXPECT_GT(by_element.fraction, 0.75) << "one row, nearly all one way";
  EXPECT_GT(by_element.z, 4.0) << "with its elements as the units";
}

TEST(RoundingBias, FewElementsOrErrorsBelowResolutionAreNotJudged) {
  const std::vector<double> e = expectations(16, 4);
  const RoundingBias few = bias_of(DType::kBF16, stored(e, Rounding::kTowardZero), e);
  EXPECT_TRUE(few.checked);
  EXPECT_GT(few.fraction, 0.99);
  EXPECT_FALSE(few.biased) << "16 elements: z = 4";
  // One row of 64 truncated: z = 1, whatever the fraction (rows are the units).
  const std::vector<double> one = expectations(64, 7);
  EXPECT_FALSE(bias_of(DType::kBF16, stored(one, Rounding::kTowardZero), one).biased);
  EXPECT_TRUE(bias_of(DType::kBF16, stored(one, Rounding::kTowardZero), one, 1).biased)
      << "64 rows of one element";
  const std::vector<double> tiny(64, 1e-42);
  EXPECT_FALSE(bias_of(DType::kBF16, std::vector<double>(64, 0.0), tiny).checked);
  // fp16 is checked like bf16.
  const std::vector<double> big = expectations(4096, 5);
  std::vector<double> a(big.size());
  for (size_t i = 0; i < big.size(); ++i) {  // truncated: one fp16 step back where RNE grew
    const uint16_t h = float_to_fp16(static_cast<float>(big[i]));
    const double r = fp16_to_float(h);
    a[i] = std::fabs(r) > std::fabs(big[i]) ? fp16_to_float(static_cast<uint16_t>(h - 1)) : r;
  }
  const RoundingBias fp16 = bias_of(DType::kF16, a, big);
  EXPECT_TRUE(fp16.biased);
  EXPECT_EQ(fp16.direction, BiasDirection::kTowardZero);
}

// The wrong stores on the gate's bf16 / fp16 gdr cases: each with enough rows (z = sqrt(rows)
// when every row shrinks: 36 rows for z = 6) fails with the bias as its only reason, its error
// within the tolerance; one with a handful of rows passes, as it must (4 rows of one token cannot
// tell a truncation from one rounding of q.k per head). fp32 cases pass. cpu passes them all with
// its bias checked and not biased.
TEST(RoundingBias, WrongStoresFailTheGateOnBiasAloneAndCpuPasses) {
  auto cpu = backends::make_backend("cpu");
  auto truncated = backends::make_backend("wrong:truncated-store");
  auto up = backends::make_backend("wrong:round-up-store");
  int caught = 0, few_rows = 0, fp32 = 0;
  for (const cases::Case& c : cases::suite("gate")) {
    if (c.op() != "gdr" || c.has("regime") || caught >= 8) continue;
    const PreparedCase pc = prepare(c);
    const CaseResult ok = run_case(pc, *cpu, false);
    const CaseResult t = run_case(pc, *truncated, false);
    EXPECT_EQ(ok.verdict, Verdict::kPass) << c.id() << ": " << ok.message;
    if (c.get("dtype") == "fp32") {
      EXPECT_EQ(t.verdict, Verdict::kPass) << c.id() << ": " << t.message;
      ++fp32;
      continue;
    }
    const TensorReport& o = t.tensors.front();
    ASSERT_EQ(o.name, "o");
    EXPECT_TRUE(ok.tensors.front().bias.checked && !ok.tensors.front().bias.biased) << c.id();
    EXPECT_LE(o.metrics.rel_rms, o.threshold.rel_rms) << c.id() << ": the bias alone";
    if (o.bias.rows < 36) {
      EXPECT_EQ(t.verdict, Verdict::kPass) << c.id() << ": " << t.message;
      few_rows += o.bias.rows <= 8;
      continue;
    }
    ++caught;
    EXPECT_EQ(t.verdict, Verdict::kFail) << c.id();
    EXPECT_TRUE(o.bias.biased) << c.id();
    EXPECT_GE(t.margin, 1.0) << c.id() << ": a biased fail's margin";
    EXPECT_LT(ok.margin, 1.0);
    EXPECT_NE(t.message.find("o biased toward zero"), std::string::npos) << t.message;
    EXPECT_NE(t.message.find("truncation instead of round-to-nearest?"), std::string::npos);
    const CaseResult u = run_case(pc, *up, false);
    EXPECT_EQ(u.verdict, Verdict::kFail) << c.id();
    EXPECT_NE(u.message.find("o biased up"), std::string::npos) << u.message;
  }
  EXPECT_EQ(caught, 8);
  EXPECT_GE(few_rows, 1) << "a one- or two-token case among them";
  EXPECT_GE(fp32, 1);
}

}  // namespace
}  // namespace deltacheck::harness
