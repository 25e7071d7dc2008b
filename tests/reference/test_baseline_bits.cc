// The same-precision baselines' results, pinned bit for bit. The baselines set every tolerance
// (harness/tolerance.h): a change to how they are computed (loop order, vectorization, rounding)
// must not move a single bit of a printed threshold, so each formulation's outputs on a few
// awkward shapes are hashed and compared to the hashes the formulations gave when the
// thresholds were calibrated (tol-v3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/simd.h"
#include "reference/gated_delta_rule.h"
#include "tests/reference/mixed.h"
#include "tests/simd_paths.h"

namespace deltacheck::reference {
namespace {

// FNV-1a over the bits of the values.
uint64_t hash_bits(const std::vector<double>& v, uint64_t h = 0xcbf29ce484222325ull) {
  for (double x : v) {
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    for (int i = 0; i < 8; ++i) h = (h ^ ((b >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

struct Problem {
  int64_t T, H, HV, K, V;
  std::vector<int64_t> cu;  // empty: one sequence
  bool l2, state;
  double gate_scale;  // g = gate_scale * (0.5 + 0.5 * mixed): 0 (no decay) to strong
};

struct Inputs {
  std::vector<double> q, k, v, g, beta, s0;
  GatedDeltaRuleArgs args;
};

Inputs make_inputs(const Problem& p) {
  Inputs in;
  auto fill = [](std::vector<double>& x, size_t n, uint64_t tensor, double scale, double shift) {
    x.resize(n);
    for (size_t i = 0; i < n; ++i) x[i] = shift + scale * mixed(tensor, i);
  };
  fill(in.q, p.T * p.H * p.K, 0, 1.0, 0.0);
  fill(in.k, p.T * p.H * p.K, 1, p.l2 ? 1.0 : 0.15, 0.0);
  fill(in.v, p.T * p.HV * p.V, 2, 1.0, 0.0);
  fill(in.g, p.T * p.HV, 3, 0.5 * p.gate_scale, -0.5 * p.gate_scale);
  fill(in.beta, p.T * p.HV, 4, 0.45, 0.5);
  const int64_t n = p.cu.empty() ? 1 : static_cast<int64_t>(p.cu.size()) - 1;
  if (p.state) fill(in.s0, n * p.HV * p.K * p.V, 5, 0.5, 0.0);
  GatedDeltaRuleArgs& a = in.args;
  a.seq_len = p.T, a.num_heads = p.H, a.num_value_heads = p.HV, a.key_dim = p.K;
  a.value_dim = p.V;
  a.q = in.q.data(), a.k = in.k.data(), a.v = in.v.data(), a.g = in.g.data();
  a.beta = in.beta.data();
  a.cu_seqlens = p.cu;
  a.initial_state = p.state ? in.s0.data() : nullptr;
  a.use_qk_l2norm = p.l2;
  return in;
}

// Every formulation the tolerance uses (harness/tolerance.cc, rule_baselines).
std::vector<Arithmetic> formulations() {
  std::vector<Arithmetic> out;
  Arithmetic recurrent;
  recurrent.fp32 = true;
  out.push_back(recurrent);
  Arithmetic chunked = recurrent;
  chunked.form = Formulation::kChunked;
  out.push_back(chunked);
  for (Rounding r : {Rounding::kBF16, Rounding::kF16}) {
    Arithmetic rec = recurrent, lowp = chunked;
    rec.output = lowp.output = r;
    lowp.operands = lowp.stored = r;
    out.push_back(rec);
    out.push_back(lowp);
  }
  Arithmetic tf32 = chunked;
  tf32.operands = Rounding::kTF32;
  out.push_back(tf32);
  return out;
}

std::string name_of(const Arithmetic& how) {
  return describe(how) + ", stored " + rounding_name(how.stored) + ", output " +
         rounding_name(how.output);
}

const std::vector<Problem>& problems() {
  static const std::vector<Problem> p{
      // Packed, a zero-length sequence, chunks cut mid-way, GVA, odd head dims, states.
      {130, 1, 2, 60, 36, {0, 3, 3, 67, 130}, true, true, 20.0},
      // One sequence of two full chunks and a tail, keys not normalized in the kernel.
      {150, 2, 2, 16, 20, {}, false, false, 1.0},
      // No decay at all (the zero-gate regime).
      {70, 1, 1, 32, 32, {0, 5, 70}, true, true, 0.0},
  };
  return p;
}

// The hashes of o and the final state per (problem, formulation), recorded from the
// formulations as calibrated. Regenerate only for a deliberate change of the tolerance
// (a new TolerancePolicy id): DELTACHECK_PRINT_BASELINE_BITS=1 prints the table.
const uint64_t kPinned[3][7][2] = {
    {{0x74aadd42d84001a9ull, 0xde5a29a013fc5bb8ull},
     {0x1221cbd34cdbfc84ull, 0x061faf310df6b63eull},
     {0x8c539412f293e21cull, 0xde5a29a013fc5bb8ull},
     {0x25307fb2e8a70e0full, 0x9b10d236d30a116eull},
     {0xb94e8613920cf2e3ull, 0xde5a29a013fc5bb8ull},
     {0x38e5c725e89ed2c0ull, 0x6da43bc317491207ull},
     {0x89bf26dd5dd4a963ull, 0xea3925190cf16c05ull}},
    {{0x03758bd7b13654e9ull, 0xa520c8838a88eb53ull},
     {0xd79f3d94e9965aeaull, 0xd09b6d0670d39488ull},
     {0xee790ba23d633f6full, 0xa520c8838a88eb53ull},
     {0x0f584008a1ca3221ull, 0xa058798562caea12ull},
     {0x363374fea2d9d56aull, 0xa520c8838a88eb53ull},
     {0x3ac000aad0aca438ull, 0x9fecb44054246407ull},
     {0x36c582cb7f800291ull, 0xcaedc20d2d123abcull}},
    {{0x31271b2670cd98a8ull, 0xa66ff6e0f30d022bull},
     {0xcf587933b37973bdull, 0xebc1ce9d30206be1ull},
     {0x5fcf4e689614b1ebull, 0xa66ff6e0f30d022bull},
     {0xb8a9c012424db3c0ull, 0xa03e990b7ef685b4ull},
     {0xa7776ec23b6742aaull, 0xa66ff6e0f30d022bull},
     {0x6a898914c0182805ull, 0xd9ee4ca0efb61515ull},
     {0x23d8e2072654ea36ull, 0x3ffb1a0e0dd4e977ull}},
};

// The baselines' loops run as an AVX2 clone where the CPU has it and as baseline x86-64 code
// otherwise (core/simd.h); both must give the pinned bits, so both run here (on a machine without
// AVX2 the first instance runs the portable path too).
using BaselineBitsOnPath = test_support::OnSimdPath;

TEST_P(BaselineBitsOnPath, EveryFormulationGivesThePinnedBits) {
  const bool print = std::getenv("DELTACHECK_PRINT_BASELINE_BITS") != nullptr;
  const std::vector<Arithmetic> hows = formulations();
  ASSERT_EQ(hows.size(), 7u);
  for (size_t pi = 0; pi < problems().size(); ++pi) {
    const Inputs in = make_inputs(problems()[pi]);
    if (print) std::printf("    {");
    for (size_t hi = 0; hi < hows.size(); ++hi) {
      const GatedDeltaRuleResult r = gated_delta_rule(in.args, hows[hi]);
      const uint64_t ho = hash_bits(r.output), hs = hash_bits(r.final_state);
      if (print)
        std::printf("{0x%016llxull, 0x%016llxull}%s", static_cast<unsigned long long>(ho),
                    static_cast<unsigned long long>(hs), hi + 1 < hows.size() ? ", " : "");
      EXPECT_EQ(ho, kPinned[pi][hi][0]) << "o of problem " << pi << ", " << name_of(hows[hi]);
      EXPECT_EQ(hs, kPinned[pi][hi][1])
          << "final state of problem " << pi << ", " << name_of(hows[hi]);
      // A degenerate result would pin nothing.
      double norm = 0;
      for (double x : r.output) norm += std::fabs(x);
      EXPECT_GT(norm, 0.0);
    }
    if (print) std::printf("},\n");
  }
}

// The FP64 oracle (the recurrence and the chunked cross-check) gives the same bits on both paths.
TEST(BaselineBits, OracleBitsEqualOnBothPaths) {
  for (const Problem& p : problems()) {
    const Inputs in = make_inputs(p);
    core::set_simd_portable(true);
    const GatedDeltaRuleResult portable = gated_delta_rule(in.args);
    const GatedDeltaRuleResult portable_chunked = gated_delta_rule_chunked(in.args, 64);
    core::set_simd_portable(false);
    const GatedDeltaRuleResult native = gated_delta_rule(in.args);
    const GatedDeltaRuleResult native_chunked = gated_delta_rule_chunked(in.args, 64);
    EXPECT_EQ(hash_bits(portable.output), hash_bits(native.output));
    EXPECT_EQ(hash_bits(portable.final_state), hash_bits(native.final_state));
    EXPECT_EQ(hash_bits(portable_chunked.output), hash_bits(native_chunked.output));
    EXPECT_EQ(hash_bits(portable_chunked.final_state), hash_bits(native_chunked.final_state));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, BaselineBitsOnPath, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "portable" : "native";
                         });

// round_to on a float (on its bits) against the definition on the exact double
// value, over a sweep of every float bit pattern and the edges: subnormals, ties, the largest
// finite values and overflow, zeros, infinities and NaN.
TEST(BaselineBits, FloatRoundingHasTheBitsOfTheDefinition) {
  std::vector<uint32_t> patterns;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 997) patterns.push_back(static_cast<uint32_t>(b));
  for (uint32_t base :
       {0x00000000u, 0x00800000u, 0x3f800000u, 0x477fe000u, 0x7f7f0000u, 0x7f7fe000u, 0x7f800000u,
        // fp16's edges: 2^-14 (its smallest normal), 2^-24 (its quantum below) and 2^-25
        0x38800000u, 0x33800000u, 0x33000000u})
    for (uint32_t d = 0; d < 0x20000u; ++d)
      for (uint32_t sign : {0u, 0x80000000u}) {
        patterns.push_back(sign | (base + d));
        patterns.push_back(sign | (base - d));
      }
  int64_t checked = 0;
  for (Rounding r : {Rounding::kTF32, Rounding::kBF16, Rounding::kF16})
    for (uint32_t b : patterns) {
      float x;
      std::memcpy(&x, &b, sizeof x);
      const float got = round_to(r, x);
      const double want = round_to(r, static_cast<double>(x));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << std::hex << b;
        continue;
      }
      ASSERT_EQ(static_cast<double>(got), want) << rounding_name(r) << " of bits " << std::hex << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;
      ++checked;
    }
  EXPECT_GT(checked, 10'000'000);
}

}  // namespace
}  // namespace deltacheck::reference
