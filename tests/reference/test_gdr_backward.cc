// The FP64 backward of the gated delta rule against an independent second form: complex-step
// differentiation of a forward written here, templated on the scalar type and run in
// std::complex<double>. For an analytic loss L, dL/dx = Im L(x + i h e_x) / h with no subtractive
// cancellation, so with h = 1e-20 the derivative is exact to rounding (~1e-15 relative); the
// reference must agree to 1e-10. The loss is L = sum(do * o) + sum(dht * final_state) over the
// tokens of the sequences, so its derivatives are exactly the gradients the backward returns.
// Deliberately wrong backwards (a state gradient carried across a sequence boundary; dh0 of
// sequence 0 for every sequence) must fail the same comparison: the check can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include "reference/gated_delta_rule_autodiff.h"
#include "reference/gated_delta_rule_backward.h"
#include "tests/reference/complex_step.h"
#include "tests/splitmix64.h"

namespace deltacheck::reference {
namespace {

using Rng = test_support::SplitMix64;

struct Spec {
  std::string name;
  int64_t B, T, H, HV, K, V;
  std::vector<int64_t> cu;  // empty: B rows; may end before T (padding tail)
  bool l2, h0, dht;
  double g_lo, g_hi;  // gate range
  bool default_scale = true;
};

// All inputs of one problem (and the upstream gradients) in FP64.
struct Problem {
  Spec sp;
  int64_t N;
  std::vector<double> q, k, v, g, beta, h0, d_out, d_ht;
  explicit Problem(const Spec& s) : sp(s), N(s.cu.empty() ? s.B : int64_t(s.cu.size()) - 1) {
    Rng r{0x5eedull + static_cast<uint64_t>(s.T * 131 + s.K * 7 + s.V)};
    auto fill = [&](std::vector<double>& x, int64_t n, double lo, double hi) {
      x.resize(static_cast<size_t>(n));
      for (auto& e : x) e = r.uniform(lo, hi);
    };
    fill(q, s.B * s.T * s.H * s.K, -1, 1);
    fill(k, s.B * s.T * s.H * s.K, -1, 1);
    fill(v, s.B * s.T * s.HV * s.V, -1, 1);
    fill(g, s.B * s.T * s.HV, s.g_lo, s.g_hi);
    fill(beta, s.B * s.T * s.HV, 0.05, 1.5);
    fill(h0, N * s.HV * s.K * s.V, -0.5, 0.5);
    if (!s.h0) std::fill(h0.begin(), h0.end(), 0.0);
    fill(d_out, s.B * s.T * s.HV * s.V, -1, 1);
    fill(d_ht, N * s.HV * s.K * s.V, -1, 1);
    if (!s.dht) std::fill(d_ht.begin(), d_ht.end(), 0.0);
  }
  GatedDeltaRuleArgs args() const {
    GatedDeltaRuleArgs a;
    a.batch = sp.B, a.seq_len = sp.T, a.num_heads = sp.H, a.num_value_heads = sp.HV;
    a.key_dim = sp.K, a.value_dim = sp.V;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data();
    a.cu_seqlens = sp.cu;
    a.initial_state = sp.h0 ? h0.data() : nullptr;
    if (!sp.default_scale) a.scale = 0.7;
    a.use_qk_l2norm = sp.l2;
    return a;
  }
  GatedDeltaRuleGradients backward() const {
    return gated_delta_rule_backward(args(), d_out.data(), sp.dht ? d_ht.data() : nullptr);
  }
};

// The loss sum(do * o) + sum(dht * S_final) by the plain recurrence in scalar type T, written
// apart from reference/ (no shared code): x * x (never |x|^2) in the norm keeps it analytic.
template <typename T>
struct Inputs {
  std::vector<T> q, k, v, g, beta, h0;
};

template <typename T>
T loss(const Problem& p, const Inputs<T>& in) {
  const Spec& s = p.sp;
  const int64_t group = s.HV / s.H;
  const double scale = s.default_scale ? 1.0 / std::sqrt(double(s.K)) : 0.7;
  T total = T(0);
  for (int64_t n = 0; n < p.N; ++n) {
    const int64_t row = s.cu.empty() ? n : 0;
    const int64_t t0 = s.cu.empty() ? 0 : s.cu[n];
    const int64_t t1 = s.cu.empty() ? s.T : s.cu[n + 1];
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      std::vector<T> S(in.h0.begin() + (n * s.HV + hv) * s.K * s.V,
                       in.h0.begin() + (n * s.HV + hv + 1) * s.K * s.V);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t qk = ((row * s.T + t) * s.H + hv / group) * s.K;
        const int64_t tok = (row * s.T + t) * s.HV + hv;
        std::vector<T> qn(in.q.begin() + qk, in.q.begin() + qk + s.K);
        std::vector<T> kn(in.k.begin() + qk, in.k.begin() + qk + s.K);
        if (s.l2) {
          test_support::l2_normalize(qn);
          test_support::l2_normalize(kn);
        }
        std::vector<T> o(static_cast<size_t>(s.V));
        test_support::delta_rule_token(S, qn, kn, &in.v[tok * s.V], in.g[tok], in.beta[tok], scale,
                                       s.K, s.V, o.data());
        for (int64_t j = 0; j < s.V; ++j) total += T(p.d_out[tok * s.V + j]) * o[j];
      }
      for (int64_t e = 0; e < s.K * s.V; ++e)
        total += T(p.d_ht[(n * s.HV + hv) * s.K * s.V + e]) * S[e];
    }
  }
  return total;
}

// Every gradient by complex step: one complex forward per input element.
GatedDeltaRuleGradients complex_step(const Problem& p) {
  using C = test_support::Complex;
  using test_support::lift;
  Inputs<C> in;
  in.q = lift(p.q), in.k = lift(p.k), in.v = lift(p.v), in.g = lift(p.g);
  in.beta = lift(p.beta), in.h0 = lift(p.h0);
  auto grad = [&](std::vector<C>& x) {
    return test_support::complex_step_gradient(x, [&] { return loss(p, in); });
  };
  return {grad(in.q), grad(in.k), grad(in.v), grad(in.g), grad(in.beta), grad(in.h0)};
}

using test_support::Disagreement;

Disagreement compare(const GatedDeltaRuleGradients& a, const GatedDeltaRuleGradients& b) {
  Disagreement d;
  auto one = [&](const char* name, const std::vector<double>& x, const std::vector<double>& y) {
    d.add(name, x, y);
  };
  one("dq", a.dq, b.dq);
  one("dk", a.dk, b.dk);
  one("dv", a.dv, b.dv);
  one("dg", a.dg, b.dg);
  one("dbeta", a.dbeta, b.dbeta);
  one("dh0", a.dh0, b.dh0);
  return d;
}

class BackwardCrossCheck : public ::testing::TestWithParam<Spec> {};

TEST_P(BackwardCrossCheck, AgreesWithComplexStepTo1e10) {
  const Problem p(GetParam());
  const GatedDeltaRuleGradients ref = p.backward();
  const GatedDeltaRuleGradients cs = complex_step(p);
  // A degenerate problem (all gradients zero) would agree trivially.
  double mag = 0.0;
  for (double x : cs.dk) mag = std::max(mag, std::abs(x));
  ASSERT_GT(mag, 1e-6) << "degenerate problem";
  const Disagreement d = compare(ref, cs);
  EXPECT_LT(d.worst, 1e-10) << "worst tensor " << d.tensor;
  std::printf("[ measured ] %s: max |ref - complex step| / max |complex step| = %.2e (%s)\n",
              GetParam().name.c_str(), d.worst, d.tensor.c_str());
}

const Spec kSpecs[] = {
    // name, B, T, H, HV, K, V, cu, l2, h0, dht, g range, default scale
    {"packed_zero_length_gva", 1, 12, 2, 4, 3, 5, {0, 3, 3, 7, 12}, true, true, true, -1, 0},
    {"packed_zero_length_first_last", 1, 9, 1, 2, 4, 3, {0, 0, 4, 9, 9}, false, true, true, -2, 0},
    {"padding_tail", 1, 12, 2, 2, 3, 4, {0, 5, 5, 9}, true, true, true, -1, -0.01},
    {"strong_decay", 1, 10, 1, 2, 3, 3, {0, 4, 10}, true, true, true, -20, -1e-4},
    {"no_l2_no_state_no_dht", 1, 10, 2, 4, 5, 3, {0, 6, 10}, false, false, false, -1, 0},
    {"l2_no_state", 1, 8, 1, 1, 5, 7, {0, 8}, true, false, true, -0.5, 0},
    {"batch_rows", 2, 6, 1, 4, 3, 2, {}, true, true, true, -1, 0},
    {"gva4_explicit_scale", 2, 5, 1, 4, 3, 3, {}, false, true, false, -3, 0, false},
    // Longer than one stored block (64 tokens): the replay from block states.
    {"crosses_block", 1, 75, 1, 1, 2, 3, {0, 5, 75}, true, true, true, -0.3, 0},
};

INSTANTIATE_TEST_SUITE_P(Reference, BackwardCrossCheck, ::testing::ValuesIn(kSpecs),
                         [](const auto& info) { return info.param.name; });

// The chunked backward baseline (Formulation::kChunked) in FP64 is the same function: it agrees
// with the oracle on every spec, for chunk sizes that cut sequences anywhere (1: every token its
// own chunk; 3 and 4: cuts inside sequences; 64: one chunk per sequence), and in fp32 it stays
// within fp32's reach of it (the strong-decay dg of the cumulative form excepted, see below).
TEST_P(BackwardCrossCheck, ChunkedFormInFp64EqualsTheOracle) {
  const Problem p(GetParam());
  const GatedDeltaRuleGradients ref = p.backward();
  for (int64_t chunk : {1, 3, 4, 64})
    for (bool exact : {false, true}) {
      Arithmetic how;
      how.form = Formulation::kChunked;
      how.chunk_size = chunk;
      how.exact_cumsum = exact;
      const GatedDeltaRuleGradients c = gated_delta_rule_backward(
          p.args(), p.d_out.data(), p.sp.dht ? p.d_ht.data() : nullptr, how);
      const Disagreement d = compare(c, ref);
      EXPECT_LT(d.worst, 1e-11) << "chunk " << chunk << (exact ? ", exact cumsum" : "")
                                << ": worst tensor " << d.tensor;
    }
}

// The cross-check catches the bug classes it exists for (it can fail).
TEST(BackwardCrossCheck, CatchesStateGradientCarriedAcrossABoundary) {
  Spec s = kSpecs[0];
  s.cu = {0, 3, 7, 12};  // no empty sequence: the carry goes from sequence 1 into sequence 0
  const Problem p(s);
  const GatedDeltaRuleGradients right = p.backward();
  // The bug: the reverse pass does not reset at a boundary, so sequence n's state gradient at
  // its end gains what sequence n+1 hands back at its start (its dh0).
  Problem carried = p;
  for (int64_t n = 0; n + 1 < p.N; ++n)
    for (int64_t e = 0; e < s.HV * s.K * s.V; ++e)
      carried.d_ht[n * s.HV * s.K * s.V + e] += right.dh0[(n + 1) * s.HV * s.K * s.V + e];
  const GatedDeltaRuleGradients wrong = carried.backward();
  const GatedDeltaRuleGradients cs = complex_step(p);
  EXPECT_LT(compare(right, cs).worst, 1e-10);
  const Disagreement d = compare(wrong, cs);
  EXPECT_GT(d.worst, 1e-3) << "a carried state gradient went unnoticed";
  std::printf("[ measured ] carried state gradient: %.2e (%s)\n", d.worst, d.tensor.c_str());
}

TEST(BackwardCrossCheck, CatchesDh0OfSequenceZeroForAll) {
  const Problem p(kSpecs[0]);
  GatedDeltaRuleGradients wrong = p.backward();
  const int64_t row = p.sp.HV * p.sp.K * p.sp.V;
  for (int64_t n = 1; n < p.N; ++n)
    std::copy(wrong.dh0.begin(), wrong.dh0.begin() + row, wrong.dh0.begin() + n * row);
  const Disagreement d = compare(wrong, complex_step(p));
  EXPECT_GT(d.worst, 1e-3);
  EXPECT_EQ(d.tensor, "dh0");
  std::printf("[ measured ] dh0 of sequence 0 for all: %.2e (%s)\n", d.worst, d.tensor.c_str());
}

// The FlashQLA PR #28 / FLA #77 class: dg as the reverse cumulative sum of dG_t, the gradient
// w.r.t. the cumulative log decay G_t (the form chunked backwards use). With S_t = e^{G_t} S~_t the
// decay enters through e^{G_t} q_t (read-out), e^{G_t} k_t (the read S'^T k) and e^{-G_t} k_t (the
// write), so dG_t = q.dq + k.dk_read - k.dk_write (+ <dht, S_L> at the last token): exact in exact
// arithmetic, but the same-token terms are O(1) and cancel down to dg ~ exp(g). One value head, no
// norm (q already scaled). Returns dg [T].
std::vector<double> dg_by_cumulative_decay(const Problem& p) {
  const Spec& s = p.sp;
  const int64_t K = s.K, V = s.V, KV = K * V;
  const double scale = 1.0 / std::sqrt(double(K));
  std::vector<double> dg(static_cast<size_t>(s.T), 0.0);
  for (int64_t n = 0; n < p.N; ++n) {
    const int64_t t0 = s.cu[n], t1 = s.cu[n + 1];
    std::vector<std::vector<double>> Sp, Sa, U;  // per token: S' (decayed), S (updated), u
    std::vector<double> S(p.h0.begin() + n * KV, p.h0.begin() + (n + 1) * KV);
    for (int64_t t = t0; t < t1; ++t) {
      for (double& e : S) e *= std::exp(p.g[t]);
      Sp.push_back(S);
      std::vector<double> u(static_cast<size_t>(V));
      for (int64_t j = 0; j < V; ++j) {
        double sk = 0.0;
        for (int64_t i = 0; i < K; ++i) sk += S[i * V + j] * p.k[t * K + i];
        u[j] = p.beta[t] * (p.v[t * V + j] - sk);
      }
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) S[i * V + j] += p.k[t * K + i] * u[j];
      Sa.push_back(S), U.push_back(u);
    }
    std::vector<double> dS(p.d_ht.begin() + n * KV, p.d_ht.begin() + (n + 1) * KV);
    double final_term = 0.0;
    for (int64_t e = 0; e < KV && t1 > t0; ++e) final_term += dS[e] * Sa.back()[e];
    double suffix = 0.0;
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const std::vector<double>&Sp_t = Sp[t - t0], &S_t = Sa[t - t0], &u = U[t - t0];
      const double* q = &p.q[t * K];
      const double* k = &p.k[t * K];
      const double* d_o = &p.d_out[t * V];
      double q_dq = 0.0, k_dk_write = 0.0, k_dk_read = 0.0;
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          q_dq += scale * q[i] * S_t[i * V + j] * d_o[j];
          dS[i * V + j] += scale * q[i] * d_o[j];
        }
      std::vector<double> dp(static_cast<size_t>(V), 0.0);
      for (int64_t j = 0; j < V; ++j) {
        for (int64_t i = 0; i < K; ++i) dp[j] += dS[i * V + j] * k[i];  // du
        for (int64_t i = 0; i < K; ++i) k_dk_write += k[i] * dS[i * V + j] * u[j];
        dp[j] *= -p.beta[t];
      }
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          k_dk_read += k[i] * Sp_t[i * V + j] * dp[j];
          dS[i * V + j] = std::exp(p.g[t]) * (dS[i * V + j] + k[i] * dp[j]);
        }
      suffix += q_dq + k_dk_read - k_dk_write + (t == t1 - 1 ? final_term : 0.0);
      dg[t] = suffix;
    }
  }
  return dg;
}

// The largest |a - b| / |b| over the elements (not over the tensor's largest |b|): small gate
// gradients under strong decay are where the digits go.
double elementwise_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

// dA_log = sum_t dg_t * g_t for one head (gates_backward.h): what a wrong dg does to A_log.
double dA_log_of(const Problem& p, const std::vector<double>& dg) {
  double s = 0.0;
  for (size_t t = 0; t < dg.size(); ++t) s += dg[t] * p.g[t];
  return s;
}

TEST(BackwardCrossCheck, CatchesDgByACancellationFormUnderStrongDecay) {
  auto run = [](double g_lo, double g_hi) {
    const Spec s{"cumulative", 1, 24, 1, 1, 4, 4, {0, 9, 24}, false, true, true, g_lo, g_hi};
    const Problem p(s);
    const std::vector<double> exact = complex_step(p).dg;
    const std::vector<double> direct = p.backward().dg, cancelling = dg_by_cumulative_decay(p);
    const double a = dA_log_of(p, exact);
    struct {
      double direct, cancelling, dA_direct, dA_cancelling;
    } r{elementwise_relative(direct, exact), elementwise_relative(cancelling, exact),
        std::abs(dA_log_of(p, direct) - a) / std::abs(a),
        std::abs(dA_log_of(p, cancelling) - a) / std::abs(a)};
    std::printf(
        "[ measured ] g in [%g, %g]: dg max elementwise relative error: direct %.2e, "
        "cumulative-decay form %.2e; dA_log relative error: %.2e vs %.2e\n",
        g_lo, g_hi, r.direct, r.cancelling, r.dA_direct, r.dA_cancelling);
    return r;
  };
  const auto weak = run(-0.5, 0.0);  // the form is right: it agrees where nothing cancels
  EXPECT_LT(weak.cancelling, 1e-10);
  EXPECT_LT(weak.direct, 1e-12);
  const auto strong = run(-20.0, -10.0);  // same-token terms O(1), dg down to exp(-20)
  EXPECT_LT(strong.direct, 1e-12);
  EXPECT_GT(strong.cancelling, 1e-6) << "the cancellation form kept its digits";
}

TEST(ChunkedBackwardBaseline, CanFailAndLosesDgUnderStrongDecayInFp32) {
  const Problem p(kSpecs[3]);  // strong_decay
  const GatedDeltaRuleGradients ref = p.backward();
  Arithmetic how;
  how.form = Formulation::kChunked;
  how.chunk_size = 64;
  how.fp32 = true;
  const GatedDeltaRuleGradients f32 =
      gated_delta_rule_backward(p.args(), p.d_out.data(), p.d_ht.data(), how);
  // dq ... dbeta and dh0 within fp32's reach; dg: the reverse cumulative sum of dG, whose O(1)
  // terms cancel to the small dg of strongly decayed tokens, keeps no digit of some of them.
  GatedDeltaRuleGradients no_dg = f32;
  no_dg.dg = ref.dg;
  EXPECT_LT(compare(no_dg, ref).worst, 1e-5);
  EXPECT_GT(elementwise_relative(f32.dg, ref.dg), 1e-4);
  // A wrong input (a gate of one token changed) moves its result: the comparison can fail.
  Problem q = p;
  q.g[3] += 0.5;
  const Disagreement d =
      compare(gated_delta_rule_backward(q.args(), q.d_out.data(), q.d_ht.data(), how), ref);
  EXPECT_GT(d.worst, 1e-3);
}

// The torch.cumsum variant (exact_cumsum: G and dg's reverse sum rounded once per token from an
// exact sum) is an arithmetic of its own, not the running fp32 sum relabelled: under strong decay
// its G differences lose more where large cumulative gates cancel, and it stays within fp32's
// reach of the oracle apart from dg, as the running sum does.
TEST(ChunkedBackwardBaseline, ExactCumsumIsItsOwnRounding) {
  const Problem p(kSpecs[3]);  // strong_decay
  const GatedDeltaRuleGradients ref = p.backward();
  Arithmetic how;
  how.form = Formulation::kChunked;
  how.fp32 = true;
  const GatedDeltaRuleGradients running =
      gated_delta_rule_backward(p.args(), p.d_out.data(), p.d_ht.data(), how);
  how.exact_cumsum = true;
  const GatedDeltaRuleGradients exact =
      gated_delta_rule_backward(p.args(), p.d_out.data(), p.d_ht.data(), how);
  EXPECT_NE(exact.dk, running.dk);
  EXPECT_NE(exact.dg, running.dg);
  GatedDeltaRuleGradients no_dg = exact;
  no_dg.dg = ref.dg;
  EXPECT_LT(compare(no_dg, ref).worst, 1e-4);
  std::printf(
      "[ measured ] strong decay, fp32 chunked: worst rel (dg excepted) running %.2e, "
      "exact cumsum %.2e\n",
      [&] {
        GatedDeltaRuleGradients r = running;
        r.dg = ref.dg;
        return compare(r, ref).worst;
      }(),
      compare(no_dg, ref).worst);
}

TEST(GatedDeltaRuleBackward, EmptySequenceHandsDhtBackAndPaddingTailIsExactlyZero) {
  Spec s = kSpecs[2];  // {0, 5, 5, 9} with T = 12
  Problem p(s);
  // Garbage in the padding tail must not reach any gradient.
  for (int64_t t = 9; t < s.T; ++t) {
    for (int64_t e = 0; e < s.H * s.K; ++e) p.q[t * s.H * s.K + e] = NAN;
    for (int64_t e = 0; e < s.HV; ++e) p.g[t * s.HV + e] = INFINITY;
    for (int64_t e = 0; e < s.HV * s.V; ++e) p.d_out[t * s.HV * s.V + e] = NAN;
  }
  const GatedDeltaRuleGradients r = p.backward();
  const int64_t row = s.HV * s.K * s.V;
  for (int64_t e = 0; e < row; ++e) EXPECT_EQ(r.dh0[row + e], p.d_ht[row + e]);
  for (int64_t t = 9; t < s.T; ++t) {
    for (int64_t e = 0; e < s.H * s.K; ++e) {
      EXPECT_EQ(r.dq[t * s.H * s.K + e], 0.0);
      EXPECT_EQ(r.dk[t * s.H * s.K + e], 0.0);
    }
    for (int64_t e = 0; e < s.HV; ++e) {
      EXPECT_EQ(r.dg[t * s.HV + e], 0.0);
      EXPECT_EQ(r.dbeta[t * s.HV + e], 0.0);
    }
    for (int64_t e = 0; e < s.HV * s.V; ++e) EXPECT_EQ(r.dv[t * s.HV * s.V + e], 0.0);
  }
  for (double x : r.dq) EXPECT_TRUE(std::isfinite(x));
}

// Context parallelism: a sequence cut across two calls (the state passed forward, the state
// gradient passed back) has the gradients of the one-shot backward; cuts inside a 64-token block
// and at its edge.
TEST(GatedDeltaRuleBackward, SplitAcrossTwoCallsEqualsOneShot) {
  const Spec whole{"whole", 1, 150, 2, 4, 4, 3, {0, 150}, true, true, true, -0.5, 0};
  const Problem p(whole);
  const GatedDeltaRuleGradients one_shot = p.backward();
  for (int64_t cut : {1, 37, 64, 100}) {
    // Sub-problem over tokens [t0, t1) of p with the given initial state and dht.
    auto part = [&](int64_t t0, int64_t t1, const std::vector<double>& h0,
                    const std::vector<double>& dht) {
      Spec s = whole;
      s.T = t1 - t0, s.cu = {0, t1 - t0};
      Problem q(s);
      auto slice = [&](const std::vector<double>& x, int64_t per_token) {
        return std::vector<double>(x.begin() + t0 * per_token, x.begin() + t1 * per_token);
      };
      q.q = slice(p.q, s.H * s.K), q.k = slice(p.k, s.H * s.K), q.v = slice(p.v, s.HV * s.V);
      q.g = slice(p.g, s.HV), q.beta = slice(p.beta, s.HV), q.d_out = slice(p.d_out, s.HV * s.V);
      q.h0 = h0, q.d_ht = dht;
      return q;
    };
    const Problem first = part(0, cut, p.h0, std::vector<double>(p.d_ht.size(), 0.0));
    const std::vector<double> mid = gated_delta_rule(first.args()).final_state;
    const GatedDeltaRuleGradients second = part(cut, whole.T, mid, p.d_ht).backward();
    const GatedDeltaRuleGradients head = part(0, cut, p.h0, second.dh0).backward();
    auto joined = [&](const std::vector<double>& a, const std::vector<double>& b) {
      std::vector<double> x = a;
      x.insert(x.end(), b.begin(), b.end());
      return x;
    };
    const GatedDeltaRuleGradients split{
        joined(head.dq, second.dq), joined(head.dk, second.dk),       joined(head.dv, second.dv),
        joined(head.dg, second.dg), joined(head.dbeta, second.dbeta), head.dh0};
    const Disagreement d = compare(split, one_shot);
    EXPECT_LT(d.worst, 1e-12) << "cut at " << cut << ", worst tensor " << d.tensor;
  }
}

// The autodiff=act baseline (reference/gated_delta_rule_autodiff.h): its graph in fp32 (no
// rounding to an activation dtype) is the rule and its derivative, so it agrees with the FP64
// oracle to fp32's reach on every spec, forward and backward, tail and zero-length sequences
// included; a wrong term in its reverse pass (planted, e.g. the norm's x * x path dropped) does
// not.
TEST_P(BackwardCrossCheck, AutodiffGraphInFp32IsTheOracleToFp32) {
  const Problem p(GetParam());
  const double* dht = p.sp.dht ? p.d_ht.data() : nullptr;
  const Disagreement d =
      compare(gated_delta_rule_backward_autodiff(p.args(), p.d_out.data(), dht, Rounding::kNone),
              p.backward());
  EXPECT_LT(d.worst, 2e-5) << "worst tensor " << d.tensor;
  if (!p.sp.cu.empty() && p.sp.cu.back() < p.sp.T) return;  // the forward has no tail
  const GatedDeltaRuleResult f = gated_delta_rule_autodiff(p.args(), Rounding::kNone);
  const GatedDeltaRuleResult ref = gated_delta_rule(p.args());
  Disagreement fd;
  fd.add("o", f.output, ref.output);
  fd.add("final_state", f.final_state, ref.final_state);
  EXPECT_LT(fd.worst, 2e-6) << fd.tensor;
}

// In bf16 the graph's state is rounded at every token: its gradients err several times more
// than the default bf16 baselines' (fp32 state, bf16 operands), and stay a baseline (not noise).
TEST(AutodiffGraphBaseline, Bf16ErrsMoreThanTheFp32StateBaselines) {
  const Problem p(kSpecs[8]);  // crosses_block: 75 tokens
  const double* dht = p.sp.dht ? p.d_ht.data() : nullptr;
  const GatedDeltaRuleGradients ref = p.backward();
  Arithmetic graph, operands;
  graph.fp32 = operands.fp32 = true;
  graph.graph = Rounding::kBF16;
  operands.operands = Rounding::kBF16;
  const Disagreement dg =
      compare(gated_delta_rule_backward(p.args(), p.d_out.data(), dht, graph), ref);
  const Disagreement dop =
      compare(gated_delta_rule_backward(p.args(), p.d_out.data(), dht, operands), ref);
  std::printf("[ measured ] bf16 graph: %.2e (%s); bf16 operands: %.2e (%s)\n", dg.worst,
              dg.tensor.c_str(), dop.worst, dop.tensor.c_str());
  EXPECT_GT(dg.worst, 2 * dop.worst);
  EXPECT_LT(dg.worst, 0.2);
  EXPECT_NE(describe(graph).find("autodiff through a bf16 graph"), std::string::npos);
}

TEST(GatedDeltaRuleBackward, RejectsBadInput) {
  const Problem p(kSpecs[0]);
  GatedDeltaRuleArgs a = p.args();
  EXPECT_THROW(gated_delta_rule_backward(a, nullptr, nullptr), std::invalid_argument);
  a.cu_seqlens = {0, 3, 13};  // past T
  EXPECT_THROW(gated_delta_rule_backward(a, p.d_out.data(), nullptr), std::invalid_argument);
  a.cu_seqlens = {0, 5, 3};  // decreasing
  EXPECT_THROW(gated_delta_rule_backward(a, p.d_out.data(), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::reference
