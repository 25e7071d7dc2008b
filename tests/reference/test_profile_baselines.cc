// The precision profiles' baselines (docs/tolerance.md, "Precision profiles"): the forward's
// chunked form with each prefix sum of the gates rounded on its own from an exact sum, at a
// chunk size other than 64, and with the q/k L2 norm in the activation dtype. Each is checked
// against the FP64 oracle (in FP64 the choice is algebra only: the same result to 1e-11) and
// against a directly written form of the same choice in fp32 (bit for bit), and each is shown
// to change the fp32 result where the choice matters (the baseline is not the default one
// under another name).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/gated_delta_rule.h"
#include "reference/rounding.h"
#include "tests/reference/mixed.h"

namespace deltacheck::reference {
namespace {

struct Inputs {
  std::vector<double> q, k, v, g, beta;
  GatedDeltaRuleArgs args;
};

// One head, K = V = 16, `T` tokens; g in [-gate, 0); q, k rounded to bf16 (as bf16
// activations hold them); l2: the in-kernel L2 norm. `g_step`: gates on a grid of that step
// instead (sums of them are exact in fp32).
Inputs make(int64_t T, double gate, bool l2, std::vector<int64_t> cu = {}, double g_step = 0) {
  Inputs in;
  const int64_t K = 16, V = 16;
  auto fill = [](std::vector<double>& x, size_t n, uint64_t t, double scale, double shift) {
    x.resize(n);
    for (size_t i = 0; i < n; ++i) x[i] = shift + scale * mixed(t, i);
  };
  fill(in.q, T * K, 0, 1.0, 0.0);
  fill(in.k, T * K, 1, 1.0, 0.0);
  for (double& x : in.q) x = round_to(Rounding::kBF16, x);
  for (double& x : in.k) x = round_to(Rounding::kBF16, x);
  fill(in.v, T * V, 2, 1.0, 0.0);
  fill(in.g, T, 3, 0.5 * gate, -0.5 * gate);
  if (g_step > 0)
    for (double& x : in.g) x = std::round(x / g_step) * g_step;
  fill(in.beta, T, 4, 0.45, 0.5);
  GatedDeltaRuleArgs& a = in.args;
  a.seq_len = T, a.key_dim = K, a.value_dim = V;
  a.q = in.q.data(), a.k = in.k.data(), a.v = in.v.data(), a.g = in.g.data();
  a.beta = in.beta.data();
  a.cu_seqlens = std::move(cu);
  a.use_qk_l2norm = l2;
  return in;
}

Arithmetic chunked(bool fp32, int64_t chunk = 64, bool exact = false,
                   Rounding norm = Rounding::kNone) {
  Arithmetic a;
  a.form = Formulation::kChunked;
  a.fp32 = fp32;
  a.chunk_size = chunk;
  a.exact_cumsum = exact;
  a.qk_norm = norm;
  return a;
}

double rel(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

double max_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST(ProfileBaselines, InFp64EachChoiceIsTheOracle) {
  // Lengths around the two chunk sizes, packed with a zero-length sequence.
  const Inputs in = make(300, 8.0, true, {0, 63, 63, 191, 300});
  const GatedDeltaRuleResult oracle = gated_delta_rule(in.args);
  for (const Arithmetic& how : {chunked(false, 128), chunked(false, 64, true),
                                chunked(false, 128, true), chunked(false, 100, true)}) {
    const GatedDeltaRuleResult r = gated_delta_rule(in.args, how);
    EXPECT_LT(max_diff(r.output, oracle.output), 1e-11) << describe(how);
    EXPECT_LT(max_diff(r.final_state, oracle.final_state), 1e-11) << describe(how);
  }
  // The L2 norm in bf16 is a different function of the inputs, not algebra: against the
  // oracle it is off by bf16's rounding of the normalized q and k (~2^-9), no more.
  Arithmetic rec;
  rec.qk_norm = Rounding::kBF16;
  const double e = rel(gated_delta_rule(in.args, rec).output, oracle.output);
  EXPECT_GT(e, 1e-4);
  EXPECT_LT(e, 1e-2);
}

// Gates on a grid of 2^-6 with |G| below 2^10: every prefix sum is exact in fp32, so the
// running sum and the independently rounded one are the same numbers, and so are the results
// bit for bit. On random gates they are not.
TEST(ProfileBaselines, TheIndependentCumsumIsTheRunningSumWhereEverySumIsExact) {
  const Inputs grid = make(150, 6.0, true, {}, 0x1p-6);
  const GatedDeltaRuleResult a = gated_delta_rule(grid.args, chunked(true, 64, false));
  const GatedDeltaRuleResult b = gated_delta_rule(grid.args, chunked(true, 64, true));
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.final_state, b.final_state);
  const Inputs random = make(150, 20.0, true);
  const GatedDeltaRuleResult c = gated_delta_rule(random.args, chunked(true, 64, false));
  const GatedDeltaRuleResult d = gated_delta_rule(random.args, chunked(true, 64, true));
  EXPECT_NE(c.output, d.output);
}

// A sequence shorter than both chunk sizes is one chunk either way: bit for bit the same. Over
// strong decay, 128-token chunks carry G twice as far, and the fp32 form loses more digits in
// exp(G_i - G_j) than with chunks of 64: the reason a 128-token kernel needs its own baseline.
TEST(ProfileBaselines, Chunk128IsChunk64WithinOneChunkAndLosesMoreUnderStrongDecay) {
  const Inputs shorter = make(60, 20.0, true);
  EXPECT_EQ(gated_delta_rule(shorter.args, chunked(true, 64)).output,
            gated_delta_rule(shorter.args, chunked(true, 128)).output);
  const Inputs in = make(256, 20.0, true);
  const GatedDeltaRuleResult oracle = gated_delta_rule(in.args);
  const GatedDeltaRuleResult r64 = gated_delta_rule(in.args, chunked(true, 64));
  const GatedDeltaRuleResult r128 = gated_delta_rule(in.args, chunked(true, 128));
  const double o64 = rel(r64.output, oracle.output), o128 = rel(r128.output, oracle.output);
  const double s64 = rel(r64.final_state, oracle.final_state);
  const double s128 = rel(r128.final_state, oracle.final_state);
  std::printf("  strong decay, rel_rms chunk 64 / 128: o %.2e / %.2e, state %.2e / %.2e\n", o64,
              o128, s64, s128);
  EXPECT_GT(o128, 2 * o64);
}

// The L2 norm in bf16 written directly (x * x, the sum, + eps, the inverse norm and x times it
// each rounded to bf16), applied to q and k beforehand, then the fp32 recurrence without an
// in-kernel norm: bit for bit the baseline's.
TEST(ProfileBaselines, TheBf16L2NormIsTheDirectlyWrittenOne) {
  Inputs in = make(70, 4.0, true);
  const int64_t K = in.args.key_dim;
  auto bf = [](float x) { return round_to(Rounding::kBF16, x); };
  auto normalize = [&](std::vector<double>& x) {
    for (size_t t = 0; t < x.size() / K; ++t) {
      float ss = 0;
      for (int64_t i = 0; i < K; ++i) {
        const float xi = static_cast<float>(x[t * K + i]);
        ss += bf(xi * xi);
      }
      const float inv = bf(1.0f / std::sqrt(bf(bf(ss) + 1e-6f)));
      for (int64_t i = 0; i < K; ++i) x[t * K + i] = bf(static_cast<float>(x[t * K + i]) * inv);
    }
  };
  Arithmetic declared;
  declared.fp32 = true;
  declared.qk_norm = Rounding::kBF16;
  const GatedDeltaRuleResult baseline = gated_delta_rule(in.args, declared);
  normalize(in.q);
  normalize(in.k);
  in.args.use_qk_l2norm = false;
  Arithmetic plain;
  plain.fp32 = true;
  const GatedDeltaRuleResult direct = gated_delta_rule(in.args, plain);
  EXPECT_EQ(baseline.output, direct.output);
  EXPECT_EQ(baseline.final_state, direct.final_state);
}

}  // namespace
}  // namespace deltacheck::reference
