// The FP64 backward of the linear-attention layer and of each of its parts (causal conv1d, gates,
// gated RMS norm) against complex-step differentiation of forwards written here, templated on the
// scalar type and sharing no code with reference/ (the rule's token step is the one
// test_gdr_backward.cc checks the rule's backward with, tests/reference/complex_step.h). Losses
// are sum(upstream * output) over every output of the forward, so their derivatives are exactly
// the gradients the backwards return. Deliberately wrong backwards must fail the same comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/causal_conv1d_backward.h"
#include "reference/gated_rms_norm_backward.h"
#include "reference/gates_backward.h"
#include "reference/linear_attention_layer_backward.h"
#include "tests/reference/complex_step.h"
#include "tests/splitmix64.h"

namespace deltacheck::reference {
namespace {

using test_support::Complex;
using test_support::complex_step_gradient;
using test_support::Disagreement;
using test_support::lift;

std::vector<double> draw(test_support::SplitMix64& r, int64_t n, double lo, double hi) {
  std::vector<double> x(static_cast<size_t>(n));
  for (auto& e : x) e = r.uniform(lo, hi);
  return x;
}

template <typename T>
T sigmoid_t(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Sequences as (first flattened token, length): packed over cu_seqlens, or B rows of T.
std::vector<std::pair<int64_t, int64_t>> sequences(int64_t B, int64_t T,
                                                   const std::vector<int64_t>& cu) {
  std::vector<std::pair<int64_t, int64_t>> s;
  if (cu.empty())
    for (int64_t n = 0; n < B; ++n) s.push_back({n * T, T});
  else
    for (size_t n = 0; n + 1 < cu.size(); ++n) s.push_back({cu[n], cu[n + 1] - cu[n]});
  return s;
}

// ---- causal conv1d -----------------------------------------------------------------------------

struct ConvSpec {
  std::string name;
  int64_t B, T, D, W;
  std::vector<int64_t> cu;  // empty: B rows; may end before T
  bool state, bias, d_final;
};

struct ConvProblem {
  ConvSpec sp;
  int64_t N;
  std::vector<double> x, w, bias, state, dy, dfs;
  explicit ConvProblem(const ConvSpec& s)
      : sp(s), N(s.cu.empty() ? s.B : static_cast<int64_t>(s.cu.size()) - 1) {
    test_support::SplitMix64 r{0xc0a7ull + static_cast<uint64_t>(s.B * 1000 + s.T * 10 + s.W)};
    const int64_t C = s.W - 1;
    x = draw(r, s.B * s.T * s.D, -1, 1), w = draw(r, s.D * s.W, -0.8, 0.8);
    bias = draw(r, s.D, -0.3, 0.3), state = draw(r, N * s.D * C, -1, 1);
    dy = draw(r, s.B * s.T * s.D, -1, 1), dfs = draw(r, N * s.D * C, -1, 1);
    if (!s.bias) std::fill(bias.begin(), bias.end(), 0.0);
    if (!s.state) std::fill(state.begin(), state.end(), 0.0);
    if (!s.d_final) std::fill(dfs.begin(), dfs.end(), 0.0);
  }
  CausalConv1dArgs args() const {
    CausalConv1dArgs a;
    a.batch = sp.B, a.seq_len = sp.T, a.channels = sp.D, a.width = sp.W;
    a.x = x.data(), a.weight = w.data(), a.bias = sp.bias ? bias.data() : nullptr;
    a.cu_seqlens = sp.cu;
    a.initial_state = sp.state ? state.data() : nullptr;
    return a;
  }
  CausalConv1dGradients backward() const {
    return causal_conv1d_backward(args(), dy.data(), sp.d_final ? dfs.data() : nullptr);
  }
};

// The convolution with SiLU in scalar T: y [B*T, D] and the final states [N, D, W-1]; state0
// empty means zeros, bias empty means none.
template <typename T>
void conv_forward(int64_t B, int64_t TT, int64_t D, int64_t W, const std::vector<int64_t>& cu,
                  const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& bias,
                  const std::vector<T>& state0, std::vector<T>& y, std::vector<T>& final_state) {
  const int64_t C = W - 1;
  const auto seqs = sequences(B, TT, cu);
  y.assign(static_cast<size_t>(B * TT * D), T(0));
  final_state.assign(seqs.size() * static_cast<size_t>(D * C), T(0));
  for (size_t n = 0; n < seqs.size(); ++n) {
    const auto [first, len] = seqs[n];
    auto in = [&](int64_t i, int64_t d) -> T {
      if (i >= 0) return x[(first + i) * D + d];
      return state0.empty() ? T(0) : state0[(n * D + d) * C + C + i];
    };
    for (int64_t t = 0; t < len; ++t)
      for (int64_t d = 0; d < D; ++d) {
        T acc = bias.empty() ? T(0) : bias[d];
        for (int64_t j = 0; j < W; ++j) acc += w[d * W + j] * in(t - C + j, d);
        y[(first + t) * D + d] = acc * sigmoid_t(acc);
      }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < C; ++j) final_state[(n * D + d) * C + j] = in(len - C + j, d);
  }
}

template <typename T>
T dot(const std::vector<double>& upstream, const std::vector<T>& x) {
  T s = T(0);
  for (size_t i = 0; i < x.size(); ++i) s += T(upstream[i]) * x[i];
  return s;
}

// Absent bias and states are zeros in the problem, so the gradients w.r.t. them are taken at zero.
CausalConv1dGradients complex_step(const ConvProblem& p) {
  const ConvSpec& s = p.sp;
  std::vector<Complex> x = lift(p.x), w = lift(p.w), bias = lift(p.bias), st = lift(p.state);
  auto loss = [&] {
    std::vector<Complex> y, fs;
    conv_forward<Complex>(s.B, s.T, s.D, s.W, s.cu, x, w, bias, st, y, fs);
    return dot(p.dy, y) + dot(p.dfs, fs);
  };
  return {complex_step_gradient(x, loss), complex_step_gradient(w, loss),
          complex_step_gradient(bias, loss), complex_step_gradient(st, loss)};
}

Disagreement compare(const CausalConv1dGradients& a, const CausalConv1dGradients& b) {
  Disagreement d;
  d.add("dx", a.dx, b.dx);
  d.add("dweight", a.dweight, b.dweight);
  d.add("dbias", a.dbias, b.dbias);
  d.add("dinitial_state", a.dinitial_state, b.dinitial_state);
  return d;
}

class ConvBackwardCrossCheck : public ::testing::TestWithParam<ConvSpec> {};

TEST_P(ConvBackwardCrossCheck, AgreesWithComplexStepTo1e12) {
  const ConvProblem p(GetParam());
  const Disagreement d = compare(p.backward(), complex_step(p));
  EXPECT_LT(d.worst, 1e-12) << "worst tensor " << d.tensor;
  std::printf("[ measured ] conv %s: %.2e (%s)\n", GetParam().name.c_str(), d.worst,
              d.tensor.c_str());
}

const ConvSpec kConvSpecs[] = {
    // name, B, T, D, W, cu, state, bias, d_final
    {"rows_b3", 3, 7, 4, 4, {}, true, true, true},
    {"rows_b2_no_state_no_bias", 2, 5, 3, 3, {}, false, false, true},
    {"packed_zero_length_short", 1, 11, 3, 4, {0, 0, 2, 2, 8, 11}, true, true, true},
    {"packed_padding_tail", 1, 12, 2, 4, {0, 5, 5, 9}, true, true, true},
    {"packed_width2_no_dfinal", 1, 9, 3, 2, {0, 4, 9}, true, false, false},
};

INSTANTIATE_TEST_SUITE_P(Reference, ConvBackwardCrossCheck, ::testing::ValuesIn(kConvSpecs),
                         [](const auto& info) { return info.param.name; });

// FLA PR #955 class: with B > 1 the weight gradient summed over the wrong rows (here: every row
// read as row 0, as a kernel that drops the batch offset does).
TEST(ConvBackwardCrossCheck, CatchesDweightOverTheWrongRows) {
  const ConvProblem p(kConvSpecs[0]);
  ConvProblem row0 = p;
  const int64_t per_row = p.sp.T * p.sp.D;
  for (int64_t b = 1; b < p.sp.B; ++b) {
    std::copy(p.x.begin(), p.x.begin() + per_row, row0.x.begin() + b * per_row);
    std::copy(p.dy.begin(), p.dy.begin() + per_row, row0.dy.begin() + b * per_row);
  }
  CausalConv1dGradients wrong = p.backward();
  wrong.dweight = row0.backward().dweight;
  const Disagreement d = compare(wrong, complex_step(p));
  EXPECT_GT(d.worst, 1e-2);
  EXPECT_EQ(d.tensor, "dweight");
  std::printf("[ measured ] conv dweight over row 0 for every row: %.2e (%s)\n", d.worst,
              d.tensor.c_str());
}

// A backward that treats the packed row as one sequence: the gradient of sequence n+1's carried-in
// context goes to the last W-1 inputs of sequence n instead of to its own initial state.
TEST(ConvBackwardCrossCheck, CatchesConvStateGradientAcrossABoundary) {
  const ConvSpec s{"leak", 1, 12, 3, 4, {0, 5, 12}, true, true, true};
  const ConvProblem p(s);
  CausalConv1dGradients wrong = p.backward();
  const int64_t D = s.D, C = s.W - 1;
  for (int64_t d = 0; d < D; ++d)
    for (int64_t j = 0; j < C; ++j) {
      double& g = wrong.dinitial_state[(1 * D + d) * C + j];
      wrong.dx[(s.cu[1] - C + j) * D + d] += g;
      g = 0.0;
    }
  const CausalConv1dGradients cs = complex_step(p);
  EXPECT_LT(compare(p.backward(), cs).worst, 1e-12);
  const Disagreement d = compare(wrong, cs);
  EXPECT_GT(d.worst, 1e-2);
  std::printf("[ measured ] conv state gradient across a boundary: %.2e (%s)\n", d.worst,
              d.tensor.c_str());
}

TEST(CausalConv1dBackward, RejectsBadInput) {
  const ConvProblem p(kConvSpecs[3]);
  CausalConv1dArgs a = p.args();
  EXPECT_THROW(causal_conv1d_backward(a, nullptr, nullptr), std::invalid_argument);
  a.cu_seqlens = {0, 5, 13};  // past T
  EXPECT_THROW(causal_conv1d_backward(a, p.dy.data(), nullptr), std::invalid_argument);
  a.cu_seqlens = {0, 5, 3};
  EXPECT_THROW(causal_conv1d_backward(a, p.dy.data(), nullptr), std::invalid_argument);
}

// ---- gates and gated RMS norm ------------------------------------------------------------------

TEST(GatesBackward, AgreesWithComplexStepUnderStrongDecay) {
  test_support::SplitMix64 r{0x9a7e5ull};
  const int64_t T = 9, HV = 3;
  // exp(A_log) * softplus(a + dt_bias) up to about 40: decays down to g = -40, and b up to 12
  // (beta within 1e-5 of 1).
  std::vector<double> a = draw(r, T * HV, -4, 4), b = draw(r, T * HV, -12, 12);
  std::vector<double> A_log = draw(r, HV, 0.5, 2.3), dt_bias = draw(r, HV, -1, 2);
  const std::vector<double> dg = draw(r, T * HV, -1, 1), dbeta = draw(r, T * HV, -1, 1);
  const GatesGradients ref = gates_backward(
      GatesArgs{T, HV, a.data(), b.data(), A_log.data(), dt_bias.data()}, dg.data(), dbeta.data());
  std::vector<Complex> ca = lift(a), cb = lift(b), cA = lift(A_log), cdt = lift(dt_bias);
  auto loss = [&] {
    Complex s = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t i = t * HV + h;
        const Complex g = -std::exp(cA[h]) * std::log(Complex(1) + std::exp(ca[i] + cdt[h]));
        s += dg[i] * g + dbeta[i] * sigmoid_t(cb[i]);
      }
    return s;
  };
  Disagreement d;
  d.add("da", ref.da, complex_step_gradient(ca, loss));
  d.add("db", ref.db, complex_step_gradient(cb, loss));
  d.add("dA_log", ref.dA_log, complex_step_gradient(cA, loss));
  d.add("ddt_bias", ref.ddt_bias, complex_step_gradient(cdt, loss));
  EXPECT_LT(d.worst, 1e-12) << d.tensor;
  std::printf("[ measured ] gates: %.2e (%s)\n", d.worst, d.tensor.c_str());
}

template <typename T>
std::vector<T> norm_forward(int64_t rows, int64_t V, const std::vector<T>& x,
                            const std::vector<T>& z, const std::vector<T>& w, double eps) {
  std::vector<T> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    T ss = T(0);
    for (int64_t i = 0; i < V; ++i) ss += x[r * V + i] * x[r * V + i];
    const T inv = T(1) / std::sqrt(ss / T(double(V)) + T(eps));
    for (int64_t i = 0; i < V; ++i) {
      const T zi = z[r * V + i];
      y[r * V + i] = w[i] * x[r * V + i] * inv * zi * sigmoid_t(zi);
    }
  }
  return y;
}

TEST(GatedRmsNormBackward, AgreesWithComplexStep) {
  test_support::SplitMix64 r{0x402aull};
  const int64_t T = 4, HV = 3, V = 5;
  std::vector<double> x = draw(r, T * HV * V, -1, 1), z = draw(r, T * HV * V, -3, 3);
  std::vector<double> w = draw(r, V, 0.5, 1.5);
  const std::vector<double> dy = draw(r, T * HV * V, -1, 1);
  x[3] = 1e-4, x[4] = -2e-4;  // a row of small entries, where eps matters
  const GatedRmsNormGradients ref = gated_rms_norm_backward(
      GatedRmsNormArgs{T, HV, V, x.data(), z.data(), w.data(), 1e-6}, dy.data());
  std::vector<Complex> cx = lift(x), cz = lift(z), cw = lift(w);
  auto loss = [&] { return dot(dy, norm_forward(T * HV, V, cx, cz, cw, 1e-6)); };
  Disagreement d;
  d.add("dx", ref.dx, complex_step_gradient(cx, loss));
  d.add("dz", ref.dz, complex_step_gradient(cz, loss));
  d.add("dweight", ref.dweight, complex_step_gradient(cw, loss));
  EXPECT_LT(d.worst, 1e-12) << d.tensor;
  std::printf("[ measured ] gated rms norm: %.2e (%s)\n", d.worst, d.tensor.c_str());
}

// ---- the layer ---------------------------------------------------------------------------------

struct LayerSpec {
  std::string name;
  int64_t T, H, HV, K, V, W;
  std::vector<int64_t> cu;  // empty: one sequence; may end before T
  bool h0, conv0, bias, dht, dconv;
  double A_log_lo, A_log_hi, dt_lo, dt_hi;  // decay regime
};

template <typename T>
struct LayerInputs {
  std::vector<T> qkv, z, a, b, conv_w, conv_b, A_log, dt_bias, norm_w, h0, conv0;
};

struct LayerProblem {
  LayerSpec sp;
  int64_t N, D;
  LayerInputs<double> in;
  std::vector<double> dy, dht, dconv;
  explicit LayerProblem(const LayerSpec& s)
      : sp(s),
        N(s.cu.empty() ? 1 : static_cast<int64_t>(s.cu.size()) - 1),
        D(2 * s.H * s.K + s.HV * s.V) {
    test_support::SplitMix64 r{0x1a7e4ull + static_cast<uint64_t>(s.T * 97 + s.HV * 5 + s.K)};
    const int64_t C = s.W - 1;
    in.qkv = draw(r, s.T * D, -1, 1), in.z = draw(r, s.T * s.HV * s.V, -2, 2);
    in.a = draw(r, s.T * s.HV, -1, 1), in.b = draw(r, s.T * s.HV, -2, 2);
    in.conv_w = draw(r, D * s.W, -0.6, 0.6), in.conv_b = draw(r, D, -0.2, 0.2);
    in.A_log = draw(r, s.HV, s.A_log_lo, s.A_log_hi), in.dt_bias = draw(r, s.HV, s.dt_lo, s.dt_hi);
    in.norm_w = draw(r, s.V, 0.5, 1.5), in.h0 = draw(r, N * s.HV * s.K * s.V, -0.5, 0.5);
    in.conv0 = draw(r, N * D * C, -1, 1);
    dy = draw(r, s.T * s.HV * s.V, -1, 1), dht = draw(r, N * s.HV * s.K * s.V, -1, 1);
    dconv = draw(r, N * D * C, -1, 1);
    if (!s.bias) std::fill(in.conv_b.begin(), in.conv_b.end(), 0.0);
    if (!s.h0) std::fill(in.h0.begin(), in.h0.end(), 0.0);
    if (!s.conv0) std::fill(in.conv0.begin(), in.conv0.end(), 0.0);
    if (!s.dht) std::fill(dht.begin(), dht.end(), 0.0);
    if (!s.dconv) std::fill(dconv.begin(), dconv.end(), 0.0);
  }
  LinearAttentionLayerArgs args() const {
    LinearAttentionLayerArgs a;
    a.seq_len = sp.T, a.num_heads = sp.H, a.num_value_heads = sp.HV;
    a.key_dim = sp.K, a.value_dim = sp.V, a.conv_width = sp.W;
    a.qkv = in.qkv.data(), a.z = in.z.data(), a.a = in.a.data(), a.b = in.b.data();
    a.conv_weight = in.conv_w.data(), a.conv_bias = sp.bias ? in.conv_b.data() : nullptr;
    a.A_log = in.A_log.data(), a.dt_bias = in.dt_bias.data(), a.norm_weight = in.norm_w.data();
    a.cu_seqlens = sp.cu;
    a.initial_state = sp.h0 ? in.h0.data() : nullptr;
    a.initial_conv_state = sp.conv0 ? in.conv0.data() : nullptr;
    return a;
  }
  LinearAttentionLayerGradients backward() const {
    return linear_attention_layer_backward(
        args(), {dy.data(), sp.dht ? dht.data() : nullptr, sp.dconv ? dconv.data() : nullptr});
  }
};

// sum(dy * y) + sum(dht * S_final) + sum(dconv * conv_final) by the layer written out in scalar T
// (zero bias and zero states stand for absent ones: the same forward).
template <typename T>
T layer_loss(const LayerProblem& p, const LayerInputs<T>& in) {
  const LayerSpec& s = p.sp;
  const int64_t D = p.D, HK = s.H * s.K, KV = s.K * s.V, group = s.HV / s.H;
  const int64_t live = s.cu.empty() ? s.T : s.cu.back();
  std::vector<int64_t> cu = s.cu.empty() ? std::vector<int64_t>{0, s.T} : s.cu;
  std::vector<T> mixed, conv_final;
  std::vector<T> x_live(in.qkv.begin(), in.qkv.begin() + live * D);
  conv_forward<T>(1, live, D, s.W, cu, x_live, in.conv_w, in.conv_b, in.conv0, mixed, conv_final);
  T total = dot(p.dconv, conv_final);
  std::vector<T> core(static_cast<size_t>(s.V));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      std::vector<T> S(in.h0.begin() + (n * s.HV + hv) * KV,
                       in.h0.begin() + (n * s.HV + hv + 1) * KV);
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        const T* row = mixed.data() + t * D;
        const int64_t kh = hv / group;
        std::vector<T> qn(row + kh * s.K, row + (kh + 1) * s.K);
        std::vector<T> kn(row + HK + kh * s.K, row + HK + (kh + 1) * s.K);
        test_support::l2_normalize(qn);
        test_support::l2_normalize(kn);
        const int64_t i = t * s.HV + hv;
        const T g = -std::exp(in.A_log[hv]) * std::log(T(1) + std::exp(in.a[i] + in.dt_bias[hv]));
        test_support::delta_rule_token(S, qn, kn, row + 2 * HK + hv * s.V, g, sigmoid_t(in.b[i]),
                                       1.0 / std::sqrt(double(s.K)), s.K, s.V, core.data());
        const std::vector<T> zr(in.z.begin() + i * s.V, in.z.begin() + (i + 1) * s.V);
        const std::vector<T> y = norm_forward(1, s.V, core, zr, in.norm_w, 1e-6);
        for (int64_t j = 0; j < s.V; ++j) total += T(p.dy[i * s.V + j]) * y[j];
      }
      for (int64_t e = 0; e < KV; ++e) total += T(p.dht[(n * s.HV + hv) * KV + e]) * S[e];
    }
  return total;
}

LinearAttentionLayerGradients complex_step(const LayerProblem& p) {
  LayerInputs<Complex> in{lift(p.in.qkv),   lift(p.in.z),       lift(p.in.a),
                          lift(p.in.b),     lift(p.in.conv_w),  lift(p.in.conv_b),
                          lift(p.in.A_log), lift(p.in.dt_bias), lift(p.in.norm_w),
                          lift(p.in.h0),    lift(p.in.conv0)};
  auto loss = [&] { return layer_loss(p, in); };
  LinearAttentionLayerGradients g;
  g.dqkv = complex_step_gradient(in.qkv, loss), g.dz = complex_step_gradient(in.z, loss);
  g.da = complex_step_gradient(in.a, loss), g.db = complex_step_gradient(in.b, loss);
  g.dconv_weight = complex_step_gradient(in.conv_w, loss);
  g.dconv_bias = complex_step_gradient(in.conv_b, loss);
  g.dA_log = complex_step_gradient(in.A_log, loss);
  g.ddt_bias = complex_step_gradient(in.dt_bias, loss);
  g.dnorm_weight = complex_step_gradient(in.norm_w, loss);
  g.dinitial_state = complex_step_gradient(in.h0, loss);
  g.dinitial_conv_state = complex_step_gradient(in.conv0, loss);
  return g;
}

Disagreement compare(const LinearAttentionLayerGradients& a,
                     const LinearAttentionLayerGradients& b) {
  Disagreement d;
  d.add("dqkv", a.dqkv, b.dqkv);
  d.add("dz", a.dz, b.dz);
  d.add("da", a.da, b.da);
  d.add("db", a.db, b.db);
  d.add("dconv_weight", a.dconv_weight, b.dconv_weight);
  d.add("dconv_bias", a.dconv_bias, b.dconv_bias);
  d.add("dA_log", a.dA_log, b.dA_log);
  d.add("ddt_bias", a.ddt_bias, b.ddt_bias);
  d.add("dnorm_weight", a.dnorm_weight, b.dnorm_weight);
  d.add("dinitial_state", a.dinitial_state, b.dinitial_state);
  d.add("dinitial_conv_state", a.dinitial_conv_state, b.dinitial_conv_state);
  return d;
}

class LayerBackwardCrossCheck : public ::testing::TestWithParam<LayerSpec> {};

TEST_P(LayerBackwardCrossCheck, AgreesWithComplexStepTo1e12) {
  const LayerProblem p(GetParam());
  const LinearAttentionLayerGradients cs = complex_step(p);
  double mag = 0.0;
  for (double x : cs.dA_log) mag = std::max(mag, std::abs(x));
  ASSERT_GT(mag, 1e-8) << "degenerate problem";
  const Disagreement d = compare(p.backward(), cs);
  EXPECT_LT(d.worst, 1e-12) << "worst tensor " << d.tensor;
  std::printf("[ measured ] layer %s: %.2e (%s)\n", GetParam().name.c_str(), d.worst,
              d.tensor.c_str());
}

const LayerSpec kLayerSpecs[] = {
    // name, T, H, HV, K, V, W, cu, h0, conv0, bias, dht, dconv, A_log range, dt_bias range
    {"packed_zero_length_gva",
     12,
     1,
     2,
     3,
     4,
     4,
     {0, 0, 5, 5, 12},
     true,
     true,
     true,
     true,
     true,
     -1,
     0,
     -1,
     1},
    {"padding_tail_gva4",
     11,
     1,
     4,
     2,
     3,
     4,
     {0, 3, 3, 8},
     true,
     true,
     true,
     true,
     true,
     -1,
     0,
     -1,
     1},
    {"strong_decay", 10, 1, 2, 3, 3, 4, {0, 4, 10}, true, true, true, true, true, 1.5, 2.5, 1, 2},
    {"one_sequence_no_states_no_bias",
     7,
     2,
     2,
     2,
     3,
     3,
     {},
     false,
     false,
     false,
     false,
     false,
     -1,
     0,
     -1,
     1},
    {"sequences_shorter_than_width",
     6,
     1,
     1,
     3,
     2,
     4,
     {0, 1, 3, 3, 6},
     true,
     true,
     true,
     true,
     true,
     -1,
     0,
     -1,
     1},
};

INSTANTIATE_TEST_SUITE_P(Reference, LayerBackwardCrossCheck, ::testing::ValuesIn(kLayerSpecs),
                         [](const auto& info) { return info.param.name; });

TEST(LinearAttentionLayerBackward, PaddingTailIsExactlyZeroAndEmptySequencesHandStatesBack) {
  const LayerProblem clean(kLayerSpecs[1]);  // {0, 3, 3, 8} in T = 11
  LayerProblem p = clean;
  const LayerSpec& s = p.sp;
  const int64_t live = s.cu.back();
  // Garbage in the tail must reach no gradient.
  for (auto* x : {&p.in.qkv, &p.in.z, &p.in.a, &p.in.b, &p.dy}) {
    const size_t per_token = x->size() / static_cast<size_t>(s.T);
    std::fill(x->begin() + live * per_token, x->end(), NAN);
  }
  const LinearAttentionLayerGradients r = p.backward(), want = clean.backward();
  const int64_t D = p.D;
  for (int64_t t = live; t < s.T; ++t) {
    for (int64_t e = 0; e < D; ++e) EXPECT_EQ(r.dqkv[t * D + e], 0.0);
    for (int64_t e = 0; e < s.HV * s.V; ++e) EXPECT_EQ(r.dz[t * s.HV * s.V + e], 0.0);
    for (int64_t e = 0; e < s.HV; ++e) {
      EXPECT_EQ(r.da[t * s.HV + e], 0.0);
      EXPECT_EQ(r.db[t * s.HV + e], 0.0);
    }
  }
  // The live tokens' and the parameters' gradients are those of the clean problem, bit for bit.
  EXPECT_EQ(r.dconv_weight, want.dconv_weight);
  EXPECT_EQ(r.dA_log, want.dA_log);
  EXPECT_EQ(r.ddt_bias, want.ddt_bias);
  EXPECT_EQ(r.dnorm_weight, want.dnorm_weight);
  EXPECT_EQ(r.dqkv, want.dqkv);
  // Sequence 1 is empty: its state gradients are the upstream ones.
  const int64_t KV = s.HV * s.K * s.V, DC = D * (s.W - 1);
  for (int64_t e = 0; e < KV; ++e) EXPECT_EQ(r.dinitial_state[KV + e], p.dht[KV + e]);
  for (int64_t e = 0; e < DC; ++e) EXPECT_EQ(r.dinitial_conv_state[DC + e], p.dconv[DC + e]);
}

TEST(LinearAttentionLayerBackward, NoLiveTokensHandsStatesBack) {
  LayerSpec s = kLayerSpecs[1];
  s.cu = {0, 0, 0};
  const LayerProblem p(s);
  const LinearAttentionLayerGradients r = p.backward();
  EXPECT_EQ(r.dinitial_state, p.dht);
  EXPECT_EQ(r.dinitial_conv_state, p.dconv);
  for (double x : r.dqkv) EXPECT_EQ(x, 0.0);
  for (double x : r.dA_log) EXPECT_EQ(x, 0.0);
}

// Context parallelism for the layer: a sequence cut across two calls (both states passed forward,
// both state gradients passed back) has the one-shot gradients; the parameter gradients are the
// sums of the two calls'. Cuts before and after the conv's W-1 context fills.
TEST(LinearAttentionLayerBackward, SplitAcrossTwoCallsEqualsOneShot) {
  const LayerSpec whole{"whole", 13,   1,    2,    3,  2, 4,  {0, 13}, true,
                        true,    true, true, true, -1, 0, -1, 1};
  const LayerProblem p(whole);
  const LinearAttentionLayerGradients one_shot = p.backward();
  for (int64_t cut : {1, 2, 6}) {
    auto part = [&](int64_t t0, int64_t t1, const std::vector<double>& h0,
                    const std::vector<double>& conv0, const std::vector<double>& dht,
                    const std::vector<double>& dconv) {
      LayerSpec s = whole;
      s.T = t1 - t0, s.cu = {0, t1 - t0};
      LayerProblem q(s);
      auto slice = [&](const std::vector<double>& x) {
        const size_t per_token = x.size() / static_cast<size_t>(whole.T);
        return std::vector<double>(x.begin() + t0 * per_token, x.begin() + t1 * per_token);
      };
      q.in = p.in;
      q.in.qkv = slice(p.in.qkv), q.in.z = slice(p.in.z), q.in.a = slice(p.in.a);
      q.in.b = slice(p.in.b), q.in.h0 = h0, q.in.conv0 = conv0;
      q.dy = slice(p.dy), q.dht = dht, q.dconv = dconv;
      return q;
    };
    const std::vector<double> no_dht(p.dht.size(), 0.0), no_dconv(p.dconv.size(), 0.0);
    const LayerProblem first = part(0, cut, p.in.h0, p.in.conv0, no_dht, no_dconv);
    const LinearAttentionLayerResult mid = linear_attention_layer(first.args());
    const LinearAttentionLayerGradients second =
        part(cut, whole.T, mid.final_state, mid.final_conv_state, p.dht, p.dconv).backward();
    const LinearAttentionLayerGradients head =
        part(0, cut, p.in.h0, p.in.conv0, second.dinitial_state, second.dinitial_conv_state)
            .backward();
    auto joined = [](std::vector<double> a, const std::vector<double>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    auto summed = [](std::vector<double> a, const std::vector<double>& b) {
      for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
      return a;
    };
    const LinearAttentionLayerGradients split{joined(head.dqkv, second.dqkv),
                                              joined(head.dz, second.dz),
                                              joined(head.da, second.da),
                                              joined(head.db, second.db),
                                              summed(head.dconv_weight, second.dconv_weight),
                                              summed(head.dconv_bias, second.dconv_bias),
                                              summed(head.dA_log, second.dA_log),
                                              summed(head.ddt_bias, second.ddt_bias),
                                              summed(head.dnorm_weight, second.dnorm_weight),
                                              head.dinitial_state,
                                              head.dinitial_conv_state};
    const Disagreement d = compare(split, one_shot);
    EXPECT_LT(d.worst, 1e-12) << "cut at " << cut << ", worst tensor " << d.tensor;
  }
}

TEST(LinearAttentionLayerBackward, RejectsBadInput) {
  const LayerProblem p(kLayerSpecs[0]);
  LinearAttentionLayerArgs a = p.args();
  EXPECT_THROW(linear_attention_layer_backward(a, {}), std::invalid_argument);
  a.cu_seqlens = {0, 5, 13};
  EXPECT_THROW(linear_attention_layer_backward(a, {p.dy.data()}), std::invalid_argument);
  a.cu_seqlens = {0, 5, 3};
  EXPECT_THROW(linear_attention_layer_backward(a, {p.dy.data()}), std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::reference
