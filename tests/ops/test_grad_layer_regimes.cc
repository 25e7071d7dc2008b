// The input regimes beyond gdr (ops/regimes.h): gdr_grad takes gdr's (its forward inputs are the
// gdr generator's, bit for bit); the layer and layer_grad take tinyqk, hugeqk and corrk, placed on
// the conv's input channels, and the rule's q/k after the conv (measured here with the FP64
// reference conv, not assumed) land in them; regime=converged is refused for the layer with its
// reason; regime=rand is every case as it was. regime=corrk's keys are correlated and the UT
// matrix I + strictly_lower(diag(beta) K K^T) it gives is worse conditioned than random keys'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/layer/params.h"
#include "ops/regimes.h"
#include "reference/causal_conv1d.h"

namespace deltacheck::ops {
namespace {

using cases::Case;
using cases::TensorMap;

bool same_bits(const cases::Tensor& a, const cases::Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::string error(const std::string& id) {
  const StatusOr<Case> c = Case::from_id(id);
  return c.ok() ? std::string() : c.status().message();
}

TEST(GradLayerRegimes, RandIsAbsentFromTheIdAndKeepsEveryBit) {
  for (const char* id : {"layer(layout=packed[63,0,65],dtype=bf16,seed=7)",
                         "layer_grad(layout=packed[63,0,65],dtype=bf16,seed=7)",
                         "gdr_grad(layout=packed[63,0,65],dtype=bf16,seed=7)"}) {
    const Case plain = Case::parse(id);
    const Case rand = plain.with("regime", "rand");
    EXPECT_EQ(plain.id(), rand.id());
    EXPECT_EQ(plain.id().find("regime"), std::string::npos) << plain.id();
    const TensorMap a = cases::generate_inputs(plain), b = cases::generate_inputs(rand);
    for (const cases::Tensor& t : a.all()) EXPECT_TRUE(same_bits(t, b.at(t.name()))) << t.name();
    const Case tiny = plain.with("regime", "tinyqk");
    EXPECT_EQ(Case::parse(tiny.id()).id(), tiny.id());  // round-trips
  }
}

TEST(GradLayerRegimes, WhatEachOpTakes) {
  EXPECT_EQ(error("gdr_grad(regime=tinyqk)"), "");
  EXPECT_EQ(error("gdr_grad(regime=corrk)"), "");
  EXPECT_EQ(error("gdr_grad(regime=converged,gate=zero)"), "");
  // gdr's rules hold for the backward's forward case.
  EXPECT_NE(error("gdr_grad(regime=converged,gate=weak)").find("needs gate=zero"),
            std::string::npos);
  EXPECT_NE(error("gdr_grad(regime=tinyqk,l2=0)").find("needs l2=1"), std::string::npos);
  for (const char* op : {"layer", "layer_grad"}) {
    for (const char* r : {"tinyqk", "hugeqk", "corrk"})
      EXPECT_EQ(error(std::string(op) + "(regime=" + r + ")"), "") << op << " " << r;
    EXPECT_NE(error(std::string(op) + "(regime=converged)").find("does not apply to the layer"),
              std::string::npos)
        << op;
  }
  EXPECT_EQ(error("layer(regime=corrk,cache=dynamic)"), "");
  EXPECT_NE(error("layer(regime=sparse)").find("is not one of"), std::string::npos);
}

TEST(GradLayerRegimes, TheBackwardsForwardInputsAreTheForwardOpsInEveryRegime) {
  for (const char* r : {"converged", "tinyqk", "hugeqk", "corrk"}) {
    const std::string p = std::string("layout=packed[63,0,65],dtype=bf16,gate=zero,regime=") + r;
    const TensorMap g = cases::generate_inputs(Case::parse("gdr(" + p + ",seed=3)"));
    const TensorMap gg = cases::generate_inputs(Case::parse("gdr_grad(" + p + ",seed=3)"));
    for (const char* name : {"q", "k", "v", "g", "beta", "initial_state"})
      EXPECT_TRUE(same_bits(g.at(name), gg.at(name))) << r << " " << name;
    const std::string l = std::string("layout=packed[63,0,65],dtype=bf16,regime=") + r;
    if (std::string(r) == "converged") continue;
    const TensorMap a = cases::generate_inputs(Case::parse("layer(" + l + ",seed=3)"));
    const TensorMap ag = cases::generate_inputs(Case::parse("layer_grad(" + l + ",seed=3)"));
    for (const cases::Tensor& t : a.all()) EXPECT_TRUE(same_bits(t, ag.at(t.name()))) << r;
  }
}

// The layer's rule inputs: the FP64 conv + SiLU of the generated qkv, split into q and k heads.
struct RuleQk {
  layer::Params d;
  std::vector<double> conv;  // [T, D]
  const double* qk(int64_t t, int64_t j) const { return conv.data() + t * d.D + j * d.K; }
};

RuleQk rule_qk(const Case& c) {
  RuleQk r{layer::decode(c), {}};
  const TensorMap in = cases::generate_inputs(c);
  const std::vector<double> x = in.at("qkv").to_double(), w = in.at("conv_weight").to_double();
  std::vector<double> b, s0;
  if (const cases::Tensor* t = in.find("conv_bias")) b = t->to_double();
  if (const cases::Tensor* t = in.find("initial_conv_state")) s0 = t->to_double();
  reference::CausalConv1dArgs a;
  a.seq_len = r.d.T, a.channels = r.d.D, a.width = r.d.W;
  a.x = x.data(), a.weight = w.data(), a.bias = b.empty() ? nullptr : b.data();
  a.cu_seqlens = r.d.layout.cu_seqlens();
  a.initial_state = s0.empty() ? nullptr : s0.data();
  r.conv = reference::causal_conv1d(a).output;
  return r;
}

double norm(const double* x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return std::sqrt(ss);
}

TEST(GradLayerRegimes, TheLayersRuleQkNormsLandInTheRegimesRange) {
  for (const char* regime : {"tinyqk", "hugeqk"})
    for (const char* dtype : {"fp32", "bf16", "fp16"})
      for (const char* kv : {"32", "128"}) {
        const Case c = Case::parse(std::string("layer(layout=packed[63,0,65],H=2,HV=4,K=") + kv +
                                   ",V=8,dtype=" + dtype + ",regime=" + regime + ",seed=9)");
        const bool tiny = std::string(regime) == "tinyqk";
        const double lo = tiny ? kTinyNormMin : kHugeNormMin,
                     hi = tiny ? kTinyNormMax : kHugeNormMax;
        const RuleQk r = rule_qk(c);
        std::vector<double> norms;
        for (int64_t t = 0; t < r.d.T; ++t)
          for (int64_t j = 0; j < 2 * r.d.H; ++j) norms.push_back(norm(r.qk(t, j), r.d.K));
        std::sort(norms.begin(), norms.end());
        const size_t n = norms.size();
        const double p05 = norms[n / 20], p95 = norms[n - 1 - n / 20];
        std::printf("  %s %s K=%s: rule q/k norms min %.3g p5 %.3g median %.3g p95 %.3g max %.3g\n",
                    regime, dtype, kv, norms[0], p05, norms[n / 2], p95, norms[n - 1]);
        // The conv mixes W tokens' norms and SiLU is not linear: the range is not exact, but
        // nine in ten tokens are within it up to a factor 2, and every one within a decade.
        EXPECT_GT(p05, lo / 2) << c.id();
        EXPECT_LT(p95, hi * 2) << c.id();
        EXPECT_GT(norms[0], lo / 10) << c.id();
        EXPECT_LT(norms[n - 1], hi * 10) << c.id();
        // Random inputs give norms of about sqrt(K) / 2: the regime moved them by decades.
        EXPECT_TRUE(tiny ? norms[n / 2] < 1e-1 : norms[n / 2] > 5e1) << c.id();
      }
}

// Mean cosine of the keys of one sequence and q/k head, pairs within 64-token chunks.
double mean_key_cosine(const std::vector<const double*>& keys, int64_t K) {
  double sum = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    for (size_t j = (i / 64) * 64; j < i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < K; ++c) dot += keys[i][c] * keys[j][c];
      sum += dot / (norm(keys[i], K) * norm(keys[j], K));
      ++pairs;
    }
  return pairs ? sum / static_cast<double>(pairs) : 0.0;
}

// cond_1(I + A) for A = strictly_lower(diag(beta) K K^T) (gate=zero: no decay), keys normalized:
// ||M||_1 ||M^-1||_1 with the inverse by forward substitution in FP64.
double ut_condition(const std::vector<const double*>& keys, const std::vector<double>& beta,
                    int64_t K) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<double> M(n * n, 0.0), inv(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    M[i * n + i] = 1;
    for (int64_t j = 0; j < i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < K; ++c) dot += keys[i][c] * keys[j][c];
      M[i * n + j] = beta[i] * dot / (norm(keys[i], K) * norm(keys[j], K));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    inv[i * n + i] = 1;
    for (int64_t col = 0; col < i; ++col) {
      double s = 0;
      for (int64_t m = col; m < i; ++m) s += M[i * n + m] * inv[m * n + col];
      inv[i * n + col] = -s;
    }
  }
  auto norm1 = [n](const std::vector<double>& X) {
    double best = 0;
    for (int64_t col = 0; col < n; ++col) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::fabs(X[i * n + col]);
      best = std::max(best, s);
    }
    return best;
  };
  return norm1(M) * norm1(inv);
}

struct KeyStats {
  double cosine, condition;
};

// gdr: the first 64 keys of the 65-token sequence of packed[63,0,65], q/k head 0, value head 0.
KeyStats gdr_key_stats(const std::string& params) {
  const Case c =
      Case::parse("gdr(layout=packed[63,0,65],H=1,HV=1,K=64,V=8,gate=zero," + params + ",seed=11)");
  const TensorMap in = cases::generate_inputs(c);
  const std::vector<double> k = in.at("k").to_double(), beta = in.at("beta").to_double();
  std::vector<const double*> keys;
  std::vector<double> b;
  for (int64_t t = 63; t < 63 + 64; ++t) keys.push_back(k.data() + t * 64), b.push_back(beta[t]);
  return {mean_key_cosine(keys, 64), ut_condition(keys, b, 64)};
}

TEST(GradLayerRegimes, CorrelatedKeysMakeTheUtMatrixIllConditioned) {
  const KeyStats rnd = gdr_key_stats("dtype=bf16"), cor = gdr_key_stats("dtype=bf16,regime=corrk");
  const KeyStats wide = gdr_key_stats("dtype=bf16,regime=corrk,beta=wide"),
                 wide_rnd = gdr_key_stats("dtype=bf16,beta=wide");
  std::printf(
      "  gdr keys: cosine %.3f (rand %.3f); cond_1(I + A) %.3g (rand %.3g), beta=wide %.3g "
      "(rand %.3g)\n",
      cor.cosine, rnd.cosine, cor.condition, rnd.condition, wide.condition, wide_rnd.condition);
  EXPECT_NEAR(cor.cosine, kCorrKCosine, 0.02);
  EXPECT_LT(std::fabs(rnd.cosine), 0.1);
  EXPECT_GT(cor.condition, 3 * rnd.condition);
  EXPECT_GT(wide.condition, 3 * wide_rnd.condition);
  // q is not touched: corrk's q is rand's.
  const TensorMap a = cases::generate_inputs(Case::parse("gdr(dtype=bf16,seed=2)"));
  const TensorMap b = cases::generate_inputs(Case::parse("gdr(dtype=bf16,regime=corrk,seed=2)"));
  EXPECT_TRUE(same_bits(a.at("q"), b.at("q")));
  EXPECT_FALSE(same_bits(a.at("k"), b.at("k")));

  // The layer: its rule's keys after the conv and SiLU share the base's direction too.
  for (const char* regime : {"rand", "corrk"}) {
    const RuleQk r = rule_qk(Case::parse(
        std::string("layer(layout=packed[63,0,65],H=1,HV=2,K=64,V=8,dtype=bf16,regime=") + regime +
        ",seed=11)"));
    std::vector<const double*> keys;
    for (int64_t t = 63; t < 63 + 64; ++t) keys.push_back(r.qk(t, 1));  // k head 0
    const double cos = mean_key_cosine(keys, 64);
    std::printf("  layer keys after the conv, regime=%s: cosine %.3f\n", regime, cos);
    if (std::string(regime) == "corrk")
      EXPECT_GT(cos, 0.8);
    else
      EXPECT_LT(cos, 0.4);  // SiLU's positive mean correlates random keys a little
  }
}

TEST(GradLayerRegimes, TheSuitesHaveRegimeCasesForEveryOpThatTakesThem) {
  for (const char* suite : {"gate", "full"}) {
    std::map<std::string, int> counts;
    for (const Case& c : cases::suite(suite))
      if (c.has("regime")) ++counts[c.op() + " " + c.get("regime")];
    for (const char* key :
         {"gdr corrk", "gdr_grad converged", "gdr_grad tinyqk", "gdr_grad corrk", "gdr_grad hugeqk",
          "layer tinyqk", "layer hugeqk", "layer corrk", "layer_grad tinyqk", "layer_grad corrk"})
      EXPECT_GE(counts[key], 1) << suite << ": " << key;
    EXPECT_EQ(counts["layer converged"], 0);
  }
  // Head dims 32 and 256 beside 64 and 128, in gate.
  std::map<std::string, int> dims;
  for (const Case& c : cases::suite("gate"))
    if (c.op() == "gdr" || c.op() == "gdr_grad" || c.op() == "layer")
      ++dims[c.op() + " " + c.get("K")];
  for (const char* key : {"gdr 32", "gdr 256", "gdr_grad 256", "layer 256"})
    EXPECT_GE(dims[key], 1) << key;
}

}  // namespace
}  // namespace deltacheck::ops
