// The FP64 oracle against hand-computed cases, and its two formulations against each other.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/gated_delta_rule.h"

namespace deltacheck::reference {
namespace {

GatedDeltaRuleArgs one_head(int64_t T, int64_t K, int64_t V, const std::vector<double>& q,
                            const std::vector<double>& k, const std::vector<double>& v,
                            const std::vector<double>& g, const std::vector<double>& beta) {
  GatedDeltaRuleArgs a;
  a.seq_len = T;
  a.key_dim = K;
  a.value_dim = V;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.g = g.data();
  a.beta = beta.data();
  a.scale = 1.0;
  return a;
}

TEST(GatedDeltaRule, SingleTokenFromZeroState) {
  // S = k (beta v)^T, o = S^T q = (k.q) beta v.
  std::vector<double> q{1, 2}, k{3, -1}, v{0.5, -2, 4}, g{-0.3}, beta{0.25};
  auto r = gated_delta_rule(one_head(1, 2, 3, q, k, v, g, beta));
  const double kq = 3 * 1 + -1 * 2;
  for (int j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(r.output[j], kq * 0.25 * v[j]);
  EXPECT_DOUBLE_EQ(r.final_state[0 * 3 + 1], 3 * 0.25 * -2);
  EXPECT_DOUBLE_EQ(r.final_state[1 * 3 + 2], -1 * 0.25 * 4);
}

TEST(GatedDeltaRule, TwoTokensByHand) {
  // K = V = 1: S1 = b1 v1 k1^2... scalar recurrence written out.
  std::vector<double> q{2, 3}, k{1, 0.5}, v{4, -1}, g{0.0, std::log(0.5)}, beta{0.5, 1.0};
  auto r = gated_delta_rule(one_head(2, 1, 1, q, k, v, g, beta));
  const double s1 = 0.5 * 4 * 1;             // u = 0.5 (4 - 0) = 2, S = 1 * 2
  const double s1d = 0.5 * s1;               // decay
  const double u2 = 1.0 * (-1 - s1d * 0.5);  // -1.5
  const double s2 = s1d + 0.5 * u2;          // 0.25
  EXPECT_DOUBLE_EQ(r.output[0], s1 * 2);
  EXPECT_DOUBLE_EQ(r.output[1], s2 * 3);
  EXPECT_DOUBLE_EQ(r.final_state[0], s2);
}

TEST(GatedDeltaRule, BetaZeroOnlyDecaysTheInitialState) {
  const int64_t K = 3, V = 2, T = 4;
  std::vector<double> q(T * K), k(T * K, 0.7), v(T * V, 9.0), g{-0.1, -0.2, 0.0, -1.0},
      beta(T, 0.0), s0(K * V);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1 * static_cast<double>(i) - 0.4;
  for (size_t i = 0; i < s0.size(); ++i) s0[i] = static_cast<double>(i) + 1;
  auto a = one_head(T, K, V, q, k, v, g, beta);
  a.initial_state = s0.data();
  auto r = gated_delta_rule(a);
  double G = 0;
  for (int64_t t = 0; t < T; ++t) {
    G += g[t];
    for (int64_t j = 0; j < V; ++j) {
      double o = 0;
      for (int64_t i = 0; i < K; ++i) o += s0[i * V + j] * q[t * K + i];
      EXPECT_NEAR(r.output[t * V + j], std::exp(G) * o, 1e-14);
    }
  }
}

TEST(GatedDeltaRule, OrthonormalKeysWithBetaOneStoreAndRecall) {
  // With g = 0, beta = 1 and orthonormal keys, S = sum_i k_i v_i^T and q = k_j reads v_j back.
  const int64_t K = 4, V = 3, T = 4;
  std::vector<double> k(T * K, 0.0), v(T * V), g(T, 0.0), beta(T, 1.0);
  for (int64_t t = 0; t < T; ++t) k[t * K + (t + 1) % K] = 1.0;
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.0 + static_cast<double>(i));
  std::vector<double> q(k);
  auto r = gated_delta_rule(one_head(T, K, V, q, k, v, g, beta));
  // At token t the read-out with q_t = k_t returns v_t exactly (after its own update).
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < V; ++j) EXPECT_NEAR(r.output[t * V + j], v[t * V + j], 1e-15);
  // Rewriting the same key replaces the value (delta rule, not accumulation).
  std::vector<double> k2{1, 0, 0, 0, 1, 0, 0, 0}, v2{1, 2, 3, 10, 20, 30}, g2(2, 0.0), b2(2, 1.0);
  auto r2 = gated_delta_rule(one_head(2, 4, 3, k2, k2, v2, g2, b2));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(r2.output[3 + j], v2[3 + j], 1e-15);
}

TEST(GatedDeltaRule, VarlenZeroLengthAndGvaAndValidation) {
  // Two value heads share one key head (blocked mapping); the empty sequence keeps its state.
  const int64_t T = 3, H = 1, HV = 2, K = 2, V = 1;
  std::vector<double> q{1, 0, 0, 1, 1, 1}, k{1, 0, 0, 1, 0.6, 0.8}, v{1, 2, 3, 4, 5, 6},
      g(T * HV, -0.1), beta(T * HV, 0.5), s0(3 * HV * K * V, 0.25);
  GatedDeltaRuleArgs a = one_head(T, K, V, q, k, v, g, beta);
  a.num_heads = H;
  a.num_value_heads = HV;
  a.cu_seqlens = {0, 1, 1, 3};
  a.initial_state = s0.data();
  auto r = gated_delta_rule(a);
  for (int64_t i = 0; i < HV * K * V; ++i) EXPECT_EQ(r.final_state[1 * HV * K * V + i], 0.25);
  // Sequence 2 alone gives the same numbers as inside the pack.
  std::vector<double> qs(q.begin() + 2, q.end()), ks(k.begin() + 2, k.end()),
      vs(v.begin() + 2, v.end()), gs(g.begin() + 2, g.end()), bs(beta.begin() + 2, beta.end());
  GatedDeltaRuleArgs b = one_head(2, K, V, qs, ks, vs, gs, bs);
  b.num_heads = H;
  b.num_value_heads = HV;
  b.initial_state = s0.data();
  auto r2 = gated_delta_rule(b);
  for (int64_t i = 0; i < 2 * HV * V; ++i) EXPECT_EQ(r.output[HV * V + i], r2.output[i]);

  a.cu_seqlens = {0, 2, 1, 3};
  EXPECT_THROW(gated_delta_rule(a), std::invalid_argument);
  a.cu_seqlens = {1, 3};
  EXPECT_THROW(gated_delta_rule(a), std::invalid_argument);
  a.cu_seqlens = {0, 2};
  EXPECT_THROW(gated_delta_rule(a), std::invalid_argument);
  a.cu_seqlens = {};
  a.num_heads = 3;
  EXPECT_THROW(gated_delta_rule(a), std::invalid_argument);
}

TEST(GatedDeltaRule, DefaultScaleAndL2Norm) {
  std::vector<double> q{3, 4}, k{0, 2}, v{1}, g{0}, beta{1};
  auto a = one_head(1, 2, 1, q, k, v, g, beta);
  a.scale.reset();
  a.use_qk_l2norm = true;
  auto r = gated_delta_rule(a);
  // k -> (0, 1) (up to eps), u = 1, S = k, o = k . q/|q| * 2^-0.5 = 0.8 / sqrt(2)
  EXPECT_NEAR(r.output[0], 0.8 / std::sqrt(2.0), 1e-6);
}

}  // namespace
}  // namespace deltacheck::reference
