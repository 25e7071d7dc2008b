// The gdr input regimes (ops/gdr/regimes.h): regime=rand is every case as it was (id and bits),
// converged memory's residual is the chosen share of |v| in the inputs the oracle sees (checked
// with the FP64 reference on every prefix, not with the generator's own recurrence), tiny and huge
// q/k norms are in their ranges, and the parameters a regime needs are enforced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/gdr/params.h"
#include "ops/gdr/regimes.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops::gdr {
namespace {

using cases::Case;

bool same_bits(const cases::TensorMap& a, const cases::TensorMap& b) {
  if (a.all().size() != b.all().size()) return false;
  for (const cases::Tensor& t : a.all()) {
    const cases::Tensor* u = b.find(t.name());
    if (!u || u->nbytes() != t.nbytes() || std::memcmp(u->data(), t.data(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

TEST(GdrRegimes, RandIsAbsentFromTheIdAndKeepsEveryBit) {
  const Case plain = Case::parse("gdr(layout=packed[63,0,65],dtype=bf16,gate=strong,seed=7)");
  const Case rand =
      Case::parse("gdr(layout=packed[63,0,65],dtype=bf16,gate=strong,regime=rand,seed=7)");
  EXPECT_EQ(plain.id(), rand.id());
  EXPECT_EQ(plain.id().find("regime"), std::string::npos);
  EXPECT_TRUE(same_bits(cases::generate_inputs(plain), cases::generate_inputs(rand)));
  const Case tiny = plain.with("regime", "tinyqk");
  EXPECT_NE(tiny.id().find("regime=tinyqk"), std::string::npos);
  EXPECT_EQ(Case::parse(tiny.id()).id(), tiny.id());  // round-trips
  // The regimes change what they say and nothing else: v, g, beta and the state as rand's.
  const cases::TensorMap a = cases::generate_inputs(plain), b = cases::generate_inputs(tiny);
  for (const char* name : {"v", "g", "beta", "initial_state"})
    EXPECT_EQ(std::memcmp(a.at(name).data(), b.at(name).data(), a.at(name).nbytes()), 0) << name;
  EXPECT_NE(std::memcmp(a.at("k").data(), b.at("k").data(), a.at("k").nbytes()), 0);
}

TEST(GdrRegimes, EveryCaseBeforeRegimesKeepsItsId) {
  // No suite case without a regime spells one, and the regime cases are additions.
  int regime_cases = 0;
  for (const Case& c : cases::suite("full")) {
    if (c.op() != "gdr") continue;
    const bool has = c.id().find("regime=") != std::string::npos;
    regime_cases += has;
    EXPECT_EQ(has, c.has("regime")) << c.id();
  }
  EXPECT_GE(regime_cases, 20);
}

TEST(GdrRegimes, TheOtherParametersARegimeNeedsAreEnforced) {
  auto error = [](const std::string& id) {
    const StatusOr<Case> c = Case::from_id(id);
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(error("gdr(regime=converged,gate=weak)").find("needs gate=zero"), std::string::npos);
  EXPECT_NE(error("gdr(regime=converged,gate=zero,state=none)").find("needs state=rand"),
            std::string::npos);
  EXPECT_NE(error("gdr(regime=converged,gate=zero,cache=pool)").find("needs cache"),
            std::string::npos);
  EXPECT_NE(error("gdr(regime=tinyqk,l2=0)").find("needs l2=1"), std::string::npos);
  EXPECT_NE(error("gdr(regime=sparse)").find("is not one of"), std::string::npos);
  EXPECT_EQ(error("gdr(regime=converged,gate=zero,cache=chunked)"), "");
  EXPECT_EQ(error("gdr(regime=hugeqk,cache=pool)"), "");
  // The backward takes gdr's regimes (tests/ops/test_grad_layer_regimes.cc).
  EXPECT_EQ(error("gdr_grad(regime=tinyqk)"), "");
}

// |v_t - p_t| / |v_t| for every token and value head, p_t = (exp(g_t) S_{t-1})^T k_t with
// S_{t-1} the FP64 reference's final state of the sequence's first t tokens, k_t L2-normalized
// when the case says so: the residual as the oracle sees it.
std::vector<double> residual_shares(const Case& c) {
  const Params d = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const std::vector<double> q = in.at("q").to_double(), k = in.at("k").to_double(),
                            v = in.at("v").to_double(), g = in.at("g").to_double(),
                            beta = in.at("beta").to_double(),
                            s0 = in.at("initial_state").to_double();
  const auto cu = d.layout.cu_seqlens();
  const int64_t per = d.HV * d.K * d.V, group = d.HV / d.H;
  std::vector<double> shares;
  for (int64_t s = 0; s < d.N; ++s)
    for (int64_t t = 0; t < cu[s + 1] - cu[s]; ++t) {
      const int64_t b = cu[s];
      reference::GatedDeltaRuleArgs a;
      a.seq_len = t;
      a.num_heads = d.H, a.num_value_heads = d.HV, a.key_dim = d.K, a.value_dim = d.V;
      a.q = q.data() + b * d.H * d.K, a.k = k.data() + b * d.H * d.K;
      a.v = v.data() + b * d.HV * d.V, a.g = g.data() + b * d.HV, a.beta = beta.data() + b * d.HV;
      a.initial_state = s0.data() + s * per;
      a.use_qk_l2norm = d.l2;
      const std::vector<double> S = reference::gated_delta_rule(a).final_state;
      const int64_t row = b + t;
      for (int64_t h = 0; h < d.HV; ++h) {
        const double* kt = k.data() + (row * d.H + h / group) * d.K;
        double ss = 0;
        for (int64_t i = 0; i < d.K; ++i) ss += kt[i] * kt[i];
        const double inv = d.l2 ? 1.0 / std::sqrt(ss + 1e-6) : 1.0,
                     decay = std::exp(g[row * d.HV + h]);
        double rr = 0, vv = 0;
        for (int64_t j = 0; j < d.V; ++j) {
          double p = 0;
          for (int64_t i = 0; i < d.K; ++i) p += S[h * d.K * d.V + i * d.V + j] * kt[i] * inv;
          const double vj = v[(row * d.HV + h) * d.V + j];
          rr += (vj - decay * p) * (vj - decay * p);
          vv += vj * vj;
        }
        shares.push_back(std::sqrt(rr / vv));
      }
    }
  return shares;
}

struct ResidualCase {
  const char* id;
  double slack;  // the share's allowed spread around kConvergedResidual: v's own rounding
};

class ConvergedResidual : public ::testing::TestWithParam<ResidualCase> {};

TEST_P(ConvergedResidual, IsTheChosenShareOfVAfterRounding) {
  const Case c = Case::parse(GetParam().id);
  const std::vector<double> shares = residual_shares(c);
  ASSERT_FALSE(shares.empty());
  double lo = 1, hi = 0, sum = 0;
  for (double x : shares) lo = std::min(lo, x), hi = std::max(hi, x), sum += x;
  const double f = kConvergedResidual, mean = sum / static_cast<double>(shares.size());
  std::printf("  %s: residual / |v| in [%.4g, %.4g], mean %.4g (2^-6 = %.4g)\n",
              c.get("dtype").c_str(), lo, hi, mean, f);
  EXPECT_GT(lo, f * (1 - GetParam().slack)) << c.id();
  EXPECT_LT(hi, f * (1 + GetParam().slack)) << c.id();
  // Above every rounding a bf16 S^T k would make (half an ulp: at most 2^-8 of each element).
  EXPECT_GT(lo, 2 * std::ldexp(1.0, -8));
}

// bf16 rounds each element of v by at most 2^-8 of it: the residual's norm moves by at most
// 2^-8 |v| = 1/4 of 2^-6; fp16 by 2^-11 |v| (1/32); fp32 by 2^-24.
INSTANTIATE_TEST_SUITE_P(
    Dtypes, ConvergedResidual,
    ::testing::Values(
        ResidualCase{"gdr(layout=packed[40,0,33],H=1,HV=2,K=32,V=32,dtype=fp32,gate=zero,"
                     "regime=converged,seed=3)",
                     1e-5},
        ResidualCase{"gdr(layout=packed[40,0,33],H=1,HV=2,K=32,V=32,dtype=bf16,gate=zero,"
                     "regime=converged,seed=3)",
                     0.26},
        ResidualCase{"gdr(layout=packed[40,0,33],H=1,HV=2,K=32,V=32,dtype=fp16,gate=zero,"
                     "regime=converged,beta=wide,seed=3)",
                     0.04},
        ResidualCase{"gdr(layout=batch[2x30],H=1,HV=2,K=16,V=24,dtype=bf16,gate=zero,"
                     "regime=converged,l2=0,seed=4)",
                     0.26}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(GdrRegimes, TinyAndHugeQkNormsAreInTheirRanges) {
  for (const char* regime : {"tinyqk", "hugeqk"})
    for (const char* dtype : {"fp32", "bf16", "fp16"}) {
      const Case c = Case::parse(std::string("gdr(layout=packed[63,0,65],H=2,HV=4,K=128,V=8,") +
                                 "dtype=" + dtype + ",regime=" + regime + ",seed=9)");
      const bool tiny = std::string(regime) == "tinyqk";
      const double lo = tiny ? kTinyNormMin : kHugeNormMin, hi = tiny ? kTinyNormMax : kHugeNormMax;
      const cases::TensorMap in = cases::generate_inputs(c);
      for (const char* name : {"q", "k"}) {
        const std::vector<double> x = in.at(name).to_double();
        double least = 1e300, most = 0;
        for (size_t tok = 0; tok < x.size() / 128; ++tok) {
          double ss = 0;
          for (size_t i = 0; i < 128; ++i) ss += x[tok * 128 + i] * x[tok * 128 + i];
          least = std::min(least, std::sqrt(ss)), most = std::max(most, std::sqrt(ss));
        }
        // Rounding to the dtype moves a norm by well under 1% (fp16's subnormals included).
        EXPECT_GT(least, lo * 0.99) << c.id() << " " << name;
        EXPECT_LT(most, hi * 1.01) << c.id() << " " << name;
        // Log-uniform over two decades: 256 draws reach both ends' decade.
        EXPECT_LT(least, lo * 10) << c.id() << " " << name;
        EXPECT_GT(most, hi / 10) << c.id() << " " << name;
      }
    }
}

}  // namespace
}  // namespace deltacheck::ops::gdr
