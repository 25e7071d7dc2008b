// Tests of the FP64 pieces around the gated delta rule: the causal conv1d, the gates, the gated RMS
// norm and the composed linear-attention layer. Hand-computed small cases first, then the
// state-carrying and packing properties the layer has to keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/causal_conv1d.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"
#include "reference/linear_attention_layer.h"

namespace deltacheck::reference {
namespace {

// splitmix64: a fixed-seed stream of uniform doubles in [lo, hi).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  double uniform(double lo, double hi) {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  std::vector<double> vec(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = uniform(lo, hi);
    return x;
  }

 private:
  uint64_t s_;
};

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

std::vector<double> slice(const std::vector<double>& x, int64_t begin, int64_t end) {
  return std::vector<double>(x.begin() + begin, x.begin() + end);
}

// ---------------------------------------------------------------------------------------------
// causal conv1d

// Two channels, five tokens. Channel 0 has weights 10^(W-1-j), so each output spells the window
// of inputs as decimal digits; channel 1 sums its window and adds a bias of 0.5.
struct HandConv {
  int64_t width;
  std::vector<double> out0, out1, final0;
};

class CausalConv1dHand : public ::testing::TestWithParam<HandConv> {};

TEST_P(CausalConv1dHand, KnownWeights) {
  const HandConv& c = GetParam();
  const int64_t W = c.width, T = 5, D = 2;
  const double x0[T] = {1, 2, 3, 4, 5}, x1[T] = {2, -1, 4, 0, 3};
  std::vector<double> x(T * D), weight(D * W);
  for (int64_t t = 0; t < T; ++t) x[t * D] = x0[t], x[t * D + 1] = x1[t];
  for (int64_t j = 0; j < W; ++j) {
    weight[j] = std::pow(10.0, static_cast<double>(W - 1 - j));
    weight[W + j] = 1.0;
  }
  const double bias[D] = {0.0, 0.5};
  CausalConv1dArgs a;
  a.seq_len = T;
  a.channels = D;
  a.width = W;
  a.x = x.data();
  a.weight = weight.data();
  a.bias = bias;
  a.silu = false;
  const CausalConv1dResult r = causal_conv1d(a);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(r.output[t * D], c.out0[t]) << "t=" << t;
    EXPECT_EQ(r.output[t * D + 1], c.out1[t]) << "t=" << t;
  }
  ASSERT_EQ(r.final_state.size(), static_cast<size_t>(D * (W - 1)));
  for (int64_t j = 0; j < W - 1; ++j) {
    EXPECT_EQ(r.final_state[j], c.final0[j]);
    EXPECT_EQ(r.final_state[(W - 1) + j], x1[T - (W - 1) + j]);
  }

  // The same with SiLU: every output goes through v / (1 + exp(-v)).
  a.silu = true;
  const CausalConv1dResult s = causal_conv1d(a);
  for (int64_t i = 0; i < T * D; ++i) {
    const double v = r.output[i];
    EXPECT_NEAR(s.output[i], v / (1.0 + std::exp(-v)), 1e-12 * std::max(1.0, std::abs(v)));
  }

  // A carried-in state [7, 8, 9] (its last W-1 entries) extends channel 0's digits to the left.
  std::vector<double> state(D * (W - 1), 0.0);
  const double carried[3] = {7, 8, 9};
  for (int64_t j = 0; j < W - 1; ++j) state[j] = carried[3 - (W - 1) + j];
  a.silu = false;
  a.initial_state = state.data();
  const CausalConv1dResult w = causal_conv1d(a);
  double expect0 = 0.0;  // digits: the last W-1 carried values, then x0[0]
  for (int64_t j = 0; j < W - 1; ++j) expect0 = 10 * expect0 + carried[3 - (W - 1) + j];
  EXPECT_EQ(w.output[0], 10 * expect0 + x0[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Widths, CausalConv1dHand,
    ::testing::Values(HandConv{2, {1, 12, 23, 34, 45}, {2.5, 1.5, 3.5, 4.5, 3.5}, {5}},
                      HandConv{3, {1, 12, 123, 234, 345}, {2.5, 1.5, 5.5, 3.5, 7.5}, {4, 5}},
                      HandConv{4, {1, 12, 123, 1234, 2345}, {2.5, 1.5, 5.5, 5.5, 6.5}, {3, 4, 5}}),
    [](const ::testing::TestParamInfo<HandConv>& i) {
      return "W" + std::to_string(i.param.width);
    });

// Running a sequence in two calls, the conv state carried between them, equals one call over the
// concatenation, including splits shorter than W-1 (the state reaches into the carried-in one).
TEST(CausalConv1d, CarriedStateEqualsConcatenation) {
  Rng rng(11);
  for (int64_t W = 2; W <= 4; ++W) {
    const int64_t D = 5, T = 9;
    const std::vector<double> x = rng.vec(T * D), weight = rng.vec(D * W), bias = rng.vec(D);
    const std::vector<double> state0 = rng.vec(D * (W - 1));
    CausalConv1dArgs whole;
    whole.seq_len = T;
    whole.channels = D;
    whole.width = W;
    whole.x = x.data();
    whole.weight = weight.data();
    whole.bias = bias.data();
    whole.initial_state = state0.data();
    const CausalConv1dResult one = causal_conv1d(whole);
    ASSERT_GT(max_abs(one.output), 0.1);

    for (int64_t split : {0, 1, 2, 3, 5, 9}) {
      CausalConv1dArgs first = whole, second = whole;
      first.seq_len = split;
      second.seq_len = T - split;
      second.x = x.data() + split * D;
      const CausalConv1dResult r1 = causal_conv1d(first);
      second.initial_state = r1.final_state.data();
      const CausalConv1dResult r2 = causal_conv1d(second);
      std::vector<double> joined = r1.output;
      joined.insert(joined.end(), r2.output.begin(), r2.output.end());
      EXPECT_EQ(max_abs_diff(joined, one.output), 0.0) << "W=" << W << " split=" << split;
      EXPECT_EQ(max_abs_diff(r2.final_state, one.final_state), 0.0)
          << "W=" << W << " split=" << split;
      if (split == 0) {
        EXPECT_EQ(max_abs_diff(r1.final_state, state0), 0.0);
      }
    }
  }
}

// Packed sequences (zero-length ones included) each give what they give alone, per-sequence
// has_initial_state flags are honoured, and the batched layout agrees with the packed one.
TEST(CausalConv1d, PackedEqualsEachSequenceAlone) {
  Rng rng(12);
  const int64_t D = 3, W = 4, S = W - 1;
  const std::vector<int64_t> cu = {0, 0, 5, 6, 6, 8, 15};
  const int64_t T = cu.back(), N = static_cast<int64_t>(cu.size()) - 1;
  const std::vector<double> x = rng.vec(T * D), weight = rng.vec(D * W), bias = rng.vec(D);
  const std::vector<double> states = rng.vec(N * D * S);
  const std::vector<bool> has = {true, true, false, false, true, true};
  CausalConv1dArgs packed;
  packed.seq_len = T;
  packed.channels = D;
  packed.width = W;
  packed.x = x.data();
  packed.weight = weight.data();
  packed.bias = bias.data();
  packed.cu_seqlens = cu;
  packed.initial_state = states.data();
  packed.has_initial_state = has;
  const CausalConv1dResult all = causal_conv1d(packed);

  for (int64_t n = 0; n < N; ++n) {
    CausalConv1dArgs alone = packed;
    alone.cu_seqlens.clear();
    alone.has_initial_state.clear();
    alone.seq_len = cu[n + 1] - cu[n];
    alone.x = x.data() + cu[n] * D;
    alone.initial_state = has[n] ? states.data() + n * D * S : nullptr;
    const CausalConv1dResult r = causal_conv1d(alone);
    EXPECT_EQ(max_abs_diff(r.output, slice(all.output, cu[n] * D, cu[n + 1] * D)), 0.0) << n;
    EXPECT_EQ(max_abs_diff(r.final_state, slice(all.final_state, n * D * S, (n + 1) * D * S)), 0.0)
        << n;
  }
  // Zero-length sequences hand back their initial state, or zeros without one.
  EXPECT_EQ(max_abs_diff(slice(all.final_state, 0, D * S), slice(states, 0, D * S)), 0.0);
  EXPECT_EQ(max_abs(slice(all.final_state, 3 * D * S, 4 * D * S)), 0.0);

  // Equal lengths: [B, T, D] batched == packed.
  CausalConv1dArgs batched = packed;
  batched.cu_seqlens.clear();
  batched.has_initial_state.clear();
  batched.batch = 3;
  batched.seq_len = 5;
  CausalConv1dArgs equal = batched;
  equal.batch = 1;
  equal.seq_len = 15;
  equal.cu_seqlens = {0, 5, 10, 15};
  const CausalConv1dResult rb = causal_conv1d(batched), rp = causal_conv1d(equal);
  EXPECT_EQ(max_abs_diff(rb.output, rp.output), 0.0);
  EXPECT_EQ(max_abs_diff(rb.final_state, rp.final_state), 0.0);
}

// A decode step equals the last token of a prefill over the concatenation.
TEST(CausalConv1d, UpdateEqualsPrefillOfConcatenation) {
  Rng rng(13);
  const int64_t D = 4, W = 4, N = 3, T = 6;  // T prefill tokens per sequence, then one more
  const std::vector<double> x = rng.vec(N * (T + 1) * D), weight = rng.vec(D * W),
                            bias = rng.vec(D);
  CausalConv1dArgs full;
  full.batch = N;
  full.seq_len = T + 1;
  full.channels = D;
  full.width = W;
  full.x = x.data();
  full.weight = weight.data();
  full.bias = bias.data();
  const CausalConv1dResult ref = causal_conv1d(full);

  std::vector<double> prefix, last;
  for (int64_t n = 0; n < N; ++n) {
    const auto row = x.begin() + n * (T + 1) * D;
    prefix.insert(prefix.end(), row, row + T * D);
    last.insert(last.end(), row + T * D, row + (T + 1) * D);
  }
  CausalConv1dArgs pre = full;
  pre.seq_len = T;
  pre.x = prefix.data();
  const CausalConv1dResult r1 = causal_conv1d(pre);
  CausalConv1dUpdateArgs up;
  up.num_seqs = N;
  up.channels = D;
  up.width = W;
  up.x = last.data();
  up.state = r1.final_state.data();
  up.weight = weight.data();
  up.bias = bias.data();
  const CausalConv1dResult r2 = causal_conv1d_update(up);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(r2.output[n * D + d], ref.output[(n * (T + 1) + T) * D + d]) << n << "," << d;
  EXPECT_EQ(max_abs_diff(r2.final_state, ref.final_state), 0.0);
}

TEST(CausalConv1d, RejectsInconsistentArgs) {
  const double x[4] = {}, w[4] = {};
  CausalConv1dArgs a;
  a.seq_len = 4;
  a.channels = 1;
  a.x = x;
  a.weight = w;
  a.cu_seqlens = {0, 3};  // does not end at T
  EXPECT_THROW(causal_conv1d(a), std::invalid_argument);
  a.cu_seqlens = {0, 3, 4};
  a.has_initial_state = {true, false};  // a flag set without a state buffer
  EXPECT_THROW(causal_conv1d(a), std::invalid_argument);
  a.has_initial_state = {false};  // wrong count
  EXPECT_THROW(causal_conv1d(a), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// gates

TEST(Gates, KnownPoints) {
  const double ln2 = std::log(2.0), ln3 = std::log(3.0);
  // Per head: A_log, dt_bias. Per token: a, b.
  const double A_log[2] = {0.0, ln2}, dt_bias[2] = {0.5, -1.0};
  const double a[4] = {-0.5, 1.0 + ln3, 800.0, -49.0};
  const double b[4] = {0.0, ln3, 800.0, -800.0};
  GatesArgs args;
  args.num_tokens = 2;
  args.num_value_heads = 2;
  args.a = a;
  args.b = b;
  args.A_log = A_log;
  args.dt_bias = dt_bias;
  const GatesResult r = gates(args);
  EXPECT_NEAR(r.g[0], -ln2, 1e-15);                  // softplus(0) = ln 2, exp(0) = 1
  EXPECT_NEAR(r.g[1], -2.0 * std::log(4.0), 1e-15);  // softplus(ln 3) = ln 4, exp(ln 2) = 2
  EXPECT_EQ(r.g[2], -800.5);                         // softplus(x) = x for large x, no overflow
  EXPECT_NEAR(r.g[3] / (-2.0 * std::exp(-50.0)), 1.0, 1e-12);  // log1p(e^-50), not 0
  EXPECT_EQ(r.beta[0], 0.5);
  EXPECT_NEAR(r.beta[1], 0.75, 1e-15);
  EXPECT_EQ(r.beta[2], 1.0);
  EXPECT_EQ(r.beta[3], 0.0);  // exp(800) would overflow in the naive form
  for (double v : r.g) EXPECT_TRUE(std::isfinite(v));
  for (double v : r.beta) EXPECT_TRUE(std::isfinite(v));
}

TEST(Gates, ScalarActivations) {
  EXPECT_NEAR(softplus(std::log(std::exp(1.0) - 1.0)), 1.0, 1e-15);
  EXPECT_NEAR(sigmoid(-std::log(3.0)), 0.25, 1e-15);
  EXPECT_EQ(silu(0.0), 0.0);
  EXPECT_NEAR(silu(std::log(3.0)), 0.75 * std::log(3.0), 1e-15);
  EXPECT_EQ(silu(-1000.0), 0.0);  // no NaN from inf * 0
}

// ---------------------------------------------------------------------------------------------
// gated RMS norm

// Constant vectors: x / rms(x) is the sign of x (eps = 0), so y = w * sign(c) * silu(z).
TEST(GatedRmsNorm, ConstantVectors) {
  const int64_t V = 4, HV = 2;
  const double ln3 = std::log(3.0);
  std::vector<double> x(HV * V), z(HV * V), w = {1, 2, 3, 4};
  for (int64_t i = 0; i < V; ++i) {
    x[i] = 3.0, z[i] = ln3;          // head 0
    x[V + i] = -0.25, z[V + i] = 0;  // head 1: silu(0) = 0
  }
  GatedRmsNormArgs a;
  a.num_tokens = 1;
  a.num_heads = HV;
  a.dim = V;
  a.x = x.data();
  a.z = z.data();
  a.weight = w.data();
  a.eps = 0.0;
  std::vector<double> y = gated_rms_norm(a);
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(y[i], w[i] * 0.75 * ln3, 1e-15);
    EXPECT_EQ(y[V + i], 0.0);
  }
  // eps enters under the root: x = 1, eps = 3 gives 1 / sqrt(1 + 3) = 0.5; head 1 has silu(1).
  for (int64_t i = 0; i < HV * V; ++i) x[i] = 1.0, z[i] = (i < V) ? ln3 : 1.0;
  a.eps = 3.0;
  y = gated_rms_norm(a);
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(y[i], w[i] * 0.5 * 0.75 * ln3, 1e-15);
    EXPECT_NEAR(y[V + i], w[i] * 0.5 / (1.0 + std::exp(-1.0)), 1e-15);
  }
}

// The RMS is per vector, not over all heads: scaling one head's x leaves the other head alone
// and leaves its own output unchanged (eps = 0).
TEST(GatedRmsNorm, EachHeadOnItsOwn) {
  Rng rng(21);
  const int64_t T = 3, HV = 2, V = 8;
  std::vector<double> x = rng.vec(T * HV * V), z = rng.vec(T * HV * V), w = rng.vec(V);
  GatedRmsNormArgs a;
  a.num_tokens = T;
  a.num_heads = HV;
  a.dim = V;
  a.x = x.data();
  a.z = z.data();
  a.weight = w.data();
  a.eps = 0.0;
  const std::vector<double> y0 = gated_rms_norm(a);
  ASSERT_GT(max_abs(y0), 0.01);
  for (int64_t i = V; i < 2 * V; ++i) x[i] *= 7.0;  // token 0, head 1
  const std::vector<double> y1 = gated_rms_norm(a);
  EXPECT_LT(max_abs_diff(y0, y1), 1e-14);
}

// ---------------------------------------------------------------------------------------------
// the linear-attention layer

struct LayerInputs {
  int64_t T, H, HV, K, V, W, D;
  std::vector<double> qkv, z, a, b, conv_weight, conv_bias, A_log, dt_bias, norm_weight;

  LayerInputs(uint64_t seed, int64_t T_, int64_t H_, int64_t HV_, int64_t K_, int64_t V_,
              int64_t W_)
      : T(T_), H(H_), HV(HV_), K(K_), V(V_), W(W_), D(2 * H_ * K_ + HV_ * V_) {
    Rng rng(seed);
    qkv = rng.vec(T * D, -2.0, 2.0);
    z = rng.vec(T * HV * V, -2.0, 2.0);
    a = rng.vec(T * HV, -3.0, 3.0);
    b = rng.vec(T * HV, -3.0, 3.0);
    conv_weight = rng.vec(D * W);
    conv_bias = rng.vec(D, -0.2, 0.2);
    A_log = rng.vec(HV, -1.0, 1.0);
    dt_bias = rng.vec(HV, -1.0, 1.0);
    norm_weight = rng.vec(V, 0.5, 1.5);
  }

  LinearAttentionLayerArgs args() const {
    LinearAttentionLayerArgs r;
    r.seq_len = T;
    r.num_heads = H;
    r.num_value_heads = HV;
    r.key_dim = K;
    r.value_dim = V;
    r.conv_width = W;
    r.qkv = qkv.data();
    r.z = z.data();
    r.a = a.data();
    r.b = b.data();
    r.conv_weight = conv_weight.data();
    r.conv_bias = conv_bias.data();
    r.A_log = A_log.data();
    r.dt_bias = dt_bias.data();
    r.norm_weight = norm_weight.data();
    return r;
  }

  // The args of tokens [begin, end) alone.
  LinearAttentionLayerArgs tokens(int64_t begin, int64_t end) const {
    LinearAttentionLayerArgs r = args();
    r.seq_len = end - begin;
    r.qkv += begin * D;
    r.z += begin * HV * V;
    r.a += begin * HV;
    r.b += begin * HV;
    return r;
  }
};

TEST(LinearAttentionLayer, PackedEqualsEachSequenceAlone) {
  const LayerInputs in(31, 40, 2, 4, 8, 6, 4);
  const std::vector<int64_t> cu = {0, 0, 1, 13, 13, 27, 40};
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  const int64_t state_size = in.HV * in.K * in.V, conv_size = in.D * (in.W - 1);
  Rng rng(32);
  const std::vector<double> states = rng.vec(N * state_size), conv_states = rng.vec(N * conv_size);

  LinearAttentionLayerArgs packed = in.args();
  packed.cu_seqlens = cu;
  packed.initial_state = states.data();
  packed.initial_conv_state = conv_states.data();
  const LinearAttentionLayerResult all = linear_attention_layer(packed);
  ASSERT_GT(max_abs(all.output), 0.01);
  const int64_t row = in.HV * in.V;
  for (int64_t n = 0; n < N; ++n) {
    LinearAttentionLayerArgs alone = in.tokens(cu[n], cu[n + 1]);
    alone.initial_state = states.data() + n * state_size;
    alone.initial_conv_state = conv_states.data() + n * conv_size;
    const LinearAttentionLayerResult r = linear_attention_layer(alone);
    EXPECT_LT(max_abs_diff(r.output, slice(all.output, cu[n] * row, cu[n + 1] * row)), 1e-13) << n;
    EXPECT_LT(
        max_abs_diff(r.final_state, slice(all.final_state, n * state_size, (n + 1) * state_size)),
        1e-13)
        << n;
    EXPECT_EQ(max_abs_diff(r.final_conv_state,
                           slice(all.final_conv_state, n * conv_size, (n + 1) * conv_size)),
              0.0)
        << n;
  }
  // Empty sequences keep their states.
  EXPECT_EQ(max_abs_diff(slice(all.final_state, 0, state_size), slice(states, 0, state_size)), 0.0);
  EXPECT_EQ(max_abs_diff(slice(all.final_conv_state, 3 * conv_size, 4 * conv_size),
                         slice(conv_states, 3 * conv_size, 4 * conv_size)),
            0.0);
}

// Chunked prefill: one sequence split into two calls at any point (inside the conv window too),
// recurrent and conv states carried, equals the one-call result.
TEST(LinearAttentionLayer, TwoCallsWithCarriedStateEqualOneCall) {
  const LayerInputs in(33, 23, 1, 2, 5, 7, 3);
  const LinearAttentionLayerResult one = linear_attention_layer(in.args());
  ASSERT_GT(max_abs(one.output), 0.01);
  ASSERT_GT(max_abs(one.final_state), 0.01);
  const int64_t row = in.HV * in.V;
  for (int64_t split : {0, 1, 2, 11, 22, 23}) {
    const LinearAttentionLayerResult r1 = linear_attention_layer(in.tokens(0, split));
    LinearAttentionLayerArgs second = in.tokens(split, in.T);
    second.initial_state = r1.final_state.data();
    second.initial_conv_state = r1.final_conv_state.data();
    const LinearAttentionLayerResult r2 = linear_attention_layer(second);
    EXPECT_LT(max_abs_diff(r1.output, slice(one.output, 0, split * row)), 1e-13) << split;
    EXPECT_LT(max_abs_diff(r2.output, slice(one.output, split * row, in.T * row)), 1e-13) << split;
    EXPECT_LT(max_abs_diff(r2.final_state, one.final_state), 1e-13) << split;
    EXPECT_EQ(max_abs_diff(r2.final_conv_state, one.final_conv_state), 0.0) << split;
  }
}

// What the layer returns for no tokens at all: nothing out, states passed through.
TEST(LinearAttentionLayer, NoTokensKeepsStates) {
  const LayerInputs in(34, 1, 1, 1, 3, 2, 4);
  Rng rng(35);
  const std::vector<double> states = rng.vec(2 * in.K * in.V), conv = rng.vec(2 * in.D * 3);
  LinearAttentionLayerArgs a = in.tokens(0, 0);
  a.cu_seqlens = {0, 0, 0};
  a.initial_state = states.data();
  a.initial_conv_state = conv.data();
  const LinearAttentionLayerResult r = linear_attention_layer(a);
  EXPECT_TRUE(r.output.empty());
  EXPECT_EQ(max_abs_diff(r.final_state, states), 0.0);
  EXPECT_EQ(max_abs_diff(r.final_conv_state, conv), 0.0);
}

}  // namespace
}  // namespace deltacheck::reference
