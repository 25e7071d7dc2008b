// The CPU backward of the linear-attention layer (kernels/cpu/linear_attention_layer_backward.h)
// and of its conv (causal_conv1d_backward.h) against the FP64 backwards
// (reference/linear_attention_layer_backward.h, causal_conv1d_backward.h): every gradient tensor,
// relative RMS error within a bound per dtype, on packed layouts with zero-length sequences,
// sequences shorter than the conv's context, a padding tail, GVA, both states in and both state
// gradients out; plus the contract's edges (tail tokens exactly zero whatever their inputs hold,
// the same bits for every thread count, no live tokens at all) and argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/causal_conv1d_backward.h"
#include "kernels/cpu/linear_attention_layer_backward.h"
#include "reference/causal_conv1d_backward.h"
#include "reference/linear_attention_layer_backward.h"
#include "tests/kernels/gdr_backward_testbed.h"
#include "tests/splitmix64.h"

namespace deltacheck::kernels::cpu {
namespace {

using Rng = test_support::SplitMix64;

// A tensor stored in `type` (raw bytes), NaN until written, and its values in FP64; its relative
// RMS error against the FP64 backward (the rule's backward tests' own, gdr_backward_testbed.h).
using Buf = backward_testbed::Tensor;
using backward_testbed::rel_rms;

// ---- the conv's backward -----------------------------------------------------------------------

struct ConvCase {
  std::string name;
  DType dt;
  std::vector<int64_t> cu;  // empty: B rows of T tokens
  int64_t B, T, D, W;
  bool bias = true, state = true, dfinal = true;
};

class ConvBackwardKernel : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvBackwardKernel, MatchesTheFp64Backward) {
  const ConvCase& c = GetParam();
  const int64_t N = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1, C = c.W - 1;
  Rng r{11 + static_cast<uint64_t>(c.T)};
  Buf x(c.dt, c.B * c.T * c.D), dy(c.dt, c.B * c.T * c.D), w(DType::kF32, c.D * c.W),
      bias(DType::kF32, c.D), s0(DType::kF32, N * c.D * C), dfs(DType::kF32, N * c.D * C);
  x.fill(r, -2, 2), dy.fill(r, -1, 1), w.fill(r, -0.6, 0.6), bias.fill(r, -0.2, 0.2);
  s0.fill(r, -1, 1), dfs.fill(r, -1, 1);
  reference::CausalConv1dArgs a;
  a.batch = c.B, a.seq_len = c.T, a.channels = c.D, a.width = c.W, a.x = x.f64.data();
  a.weight = w.f64.data(), a.bias = c.bias ? bias.f64.data() : nullptr, a.cu_seqlens = c.cu;
  a.initial_state = c.state ? s0.f64.data() : nullptr;
  const auto ref =
      reference::causal_conv1d_backward(a, dy.f64.data(), c.dfinal ? dfs.f64.data() : nullptr);
  Buf dx(c.dt, c.B * c.T * c.D), dw(DType::kF32, c.D * c.W), db(DType::kF32, c.D),
      ds0(DType::kF32, N * c.D * C);
  CausalConv1dBackwardParams p;
  p.batch = c.B, p.seq_len = c.T, p.channels = c.D, p.width = c.W, p.dtype = c.dt;
  p.x = x.data(), p.weight = w.f(), p.bias = c.bias ? bias.f() : nullptr;
  if (!c.cu.empty()) p.cu_seqlens = c.cu.data(), p.num_seqs = N;
  p.initial_state = c.state ? s0.f() : nullptr, p.d_out = dy.data();
  p.d_final_state = c.dfinal ? dfs.f() : nullptr;
  p.dx = dx.data(), p.dweight = dw.f(), p.dbias = db.f(), p.dinitial_state = ds0.f();
  ASSERT_TRUE(causal_conv1d_backward(p).ok());
  // dx in the activation dtype carries its final rounding (2u); the sums in fp32: 2e-6.
  const double narrow = c.dt == DType::kBF16  ? 2 * 0x1p-8
                        : c.dt == DType::kF16 ? 2 * 0x1p-11
                                              : 2e-6;
  EXPECT_LT(rel_rms(dx, ref.dx), narrow) << "dx";
  EXPECT_LT(rel_rms(dw, ref.dweight), 2e-6) << "dweight";
  EXPECT_LT(rel_rms(db, ref.dbias), 2e-6) << "dbias";
  EXPECT_LT(rel_rms(ds0, ref.dinitial_state), 2e-6) << "dinitial_state";
  if (!c.cu.empty()) {  // the padding tail: exactly zero
    for (int64_t i = c.cu.back() * c.D; i < c.T * c.D; ++i) ASSERT_EQ(dx.at(i), 0.0) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvBackwardKernel,
    ::testing::Values(ConvCase{"rows", DType::kF32, {}, 3, 9, 37, 4},
                      ConvCase{"packed", DType::kF32, {0, 0, 2, 2, 8, 11}, 1, 11, 20, 4},
                      ConvCase{"tail", DType::kBF16, {0, 5, 5, 9}, 1, 12, 33, 3},
                      ConvCase{
                          "nostate", DType::kF16, {0, 1, 40}, 1, 40, 17, 2, false, false, false},
                      ConvCase{"rows_bf16", DType::kBF16, {}, 2, 70, 48, 4}),
    [](const auto& info) { return info.param.name; });

// ---- the layer's backward ----------------------------------------------------------------------

struct LayerCase {
  std::string name;
  DType dt;
  std::vector<int64_t> cu;  // empty: one sequence of T tokens
  int64_t T, H, HV, K, V, W;
  bool bias = true, states = true, upstream = true;
};

struct Layer {
  LayerCase c;
  int64_t N, D;
  Buf qkv, z, a, b, w, bias, alog, dtb, nw, s0, c0, dout, dht, dconv;
  explicit Layer(const LayerCase& c_)
      : c(c_),
        N(c.cu.empty() ? 1 : static_cast<int64_t>(c.cu.size()) - 1),
        D(2 * c.H * c.K + c.HV * c.V),
        qkv(c.dt, c.T * D),
        z(c.dt, c.T * c.HV * c.V),
        a(c.dt, c.T * c.HV),
        b(c.dt, c.T * c.HV),
        w(DType::kF32, D * c.W),
        bias(DType::kF32, D),
        alog(DType::kF32, c.HV),
        dtb(DType::kF32, c.HV),
        nw(DType::kF32, c.V),
        s0(DType::kF32, N * c.HV * c.K * c.V),
        c0(DType::kF32, N * D * (c.W - 1)),
        dout(c.dt, c.T * c.HV * c.V),
        dht(DType::kF32, N * c.HV * c.K * c.V),
        dconv(DType::kF32, N * D * (c.W - 1)) {
    Rng r{23 + static_cast<uint64_t>(c.T)};
    qkv.fill(r, -2, 2), z.fill(r, -2, 2), a.fill(r, -2, 2), b.fill(r, -2, 2);
    w.fill(r, -0.6, 0.6), bias.fill(r, -0.2, 0.2), alog.fill(r, -1, 1.5), dtb.fill(r, -1, 1);
    nw.fill(r, 0.8, 1.2), s0.fill(r, -0.3, 0.3), c0.fill(r, -1, 1), dout.fill(r, -1, 1);
    dht.fill(r, -0.5, 0.5), dconv.fill(r, -1, 1);
  }

  reference::LinearAttentionLayerGradients oracle() const {
    reference::LinearAttentionLayerArgs r;
    r.seq_len = c.T, r.num_heads = c.H, r.num_value_heads = c.HV, r.key_dim = c.K;
    r.value_dim = c.V, r.conv_width = c.W;
    r.qkv = qkv.f64.data(), r.z = z.f64.data(), r.a = a.f64.data(), r.b = b.f64.data();
    r.conv_weight = w.f64.data(), r.conv_bias = c.bias ? bias.f64.data() : nullptr;
    r.A_log = alog.f64.data(), r.dt_bias = dtb.f64.data(), r.norm_weight = nw.f64.data();
    r.cu_seqlens = c.cu;
    r.initial_state = c.states ? s0.f64.data() : nullptr;
    r.initial_conv_state = c.states ? c0.f64.data() : nullptr;
    return reference::linear_attention_layer_backward(
        r, {dout.f64.data(), c.upstream ? dht.f64.data() : nullptr,
            c.upstream ? dconv.f64.data() : nullptr});
  }
};

struct LayerGrads {
  Buf dqkv, dz, da, db, dw, dbias, dalog, ddt, dnw, ds0, dc0;
  explicit LayerGrads(const Layer& l)
      : dqkv(l.c.dt, l.c.T * l.D),
        dz(l.c.dt, l.c.T * l.c.HV * l.c.V),
        da(l.c.dt, l.c.T * l.c.HV),
        db(l.c.dt, l.c.T * l.c.HV),
        dw(DType::kF32, l.D * l.c.W),
        dbias(DType::kF32, l.D),
        dalog(DType::kF32, l.c.HV),
        ddt(DType::kF32, l.c.HV),
        dnw(DType::kF32, l.c.V),
        ds0(DType::kF32, l.N * l.c.HV * l.c.K * l.c.V),
        dc0(DType::kF32, l.N * l.D * (l.c.W - 1)) {}
};

LinearAttentionLayerBackwardParams params(Layer& l, LayerGrads& g, int threads = 0) {
  LinearAttentionLayerBackwardParams p;
  LinearAttentionLayerParams& f = p.forward;
  f.seq_len = l.c.T, f.num_heads = l.c.H, f.num_value_heads = l.c.HV, f.key_dim = l.c.K;
  f.value_dim = l.c.V, f.conv_width = l.c.W, f.dtype = l.c.dt;
  f.qkv = l.qkv.data(), f.z = l.z.data(), f.a = l.a.data(), f.b = l.b.data();
  f.conv_weight = l.w.f(), f.conv_bias = l.c.bias ? l.bias.f() : nullptr;
  f.A_log = l.alog.f(), f.dt_bias = l.dtb.f(), f.norm_weight = l.nw.f();
  if (!l.c.cu.empty()) f.cu_seqlens = l.c.cu.data(), f.num_seqs = l.N;
  f.initial_state = l.c.states ? l.s0.f() : nullptr;
  f.initial_conv_state = l.c.states ? l.c0.f() : nullptr;
  f.num_threads = threads;
  p.d_output = l.dout.data();
  p.d_final_state = l.c.upstream ? l.dht.f() : nullptr;
  p.d_final_conv_state = l.c.upstream ? l.dconv.f() : nullptr;
  p.dqkv = g.dqkv.data(), p.dz = g.dz.data(), p.da = g.da.data(), p.db = g.db.data();
  p.dconv_weight = g.dw.f(), p.dconv_bias = g.dbias.f(), p.dA_log = g.dalog.f();
  p.ddt_bias = g.ddt.f(), p.dnorm_weight = g.dnw.f(), p.dinitial_state = g.ds0.f();
  p.dinitial_conv_state = g.dc0.f();
  return p;
}

// Bounds on the relative RMS error per tensor. Every intermediate is kept in the activation dtype
// (as the forward keeps it), so a gradient reached through k steps carries about k roundings of
// u = 2^-8 (bf16) / 2^-11 (fp16) each: measured up to 1.3e-2 (bf16) and 1.3e-3 (fp16) at
// K = V = 32. Bound: 4u. (At K = V = 16 the bf16 layer is worse conditioned: the L2 norm's
// backward divides by |q| and |k| of 16 SiLU'd conv outputs, and the same kernel measured 8e-2 in
// dqkv there, while its fp32 twin stays at 1e-6; docs/gradients.md.) fp32 storage: 2e-5, ten
// times the largest error measured (2.0e-6, dA_log of a 6-token pack), while a lost term or a
// wrong sign of one token's contribution is orders of magnitude above it.
double bound(DType dt) {
  return dt == DType::kBF16 ? 4 * 0x1p-8 : dt == DType::kF16 ? 4 * 0x1p-11 : 2e-5;
}

class LayerBackwardKernel : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerBackwardKernel, MatchesTheFp64Backward) {
  const LayerCase& c = GetParam();
  Layer l(c);
  const auto ref = l.oracle();
  LayerGrads g(l);
  const Status st = linear_attention_layer_backward(params(l, g));
  ASSERT_TRUE(st.ok()) << st.message();
  const struct {
    const char* name;
    const Buf& got;
    const std::vector<double>& want;
  } rows[] = {{"dqkv", g.dqkv, ref.dqkv},
              {"dz", g.dz, ref.dz},
              {"da", g.da, ref.da},
              {"db", g.db, ref.db},
              {"dconv_weight", g.dw, ref.dconv_weight},
              {"dconv_bias", g.dbias, ref.dconv_bias},
              {"dA_log", g.dalog, ref.dA_log},
              {"ddt_bias", g.ddt, ref.ddt_bias},
              {"dnorm_weight", g.dnw, ref.dnorm_weight},
              {"dinitial_state", g.ds0, ref.dinitial_state},
              {"dinitial_conv_state", g.dc0, ref.dinitial_conv_state}};
  std::printf("[ measured ] %s:", c.name.c_str());
  for (const auto& r : rows) {
    const double e = rel_rms(r.got, r.want);
    std::printf(" %s %.1e", r.name, e);
    EXPECT_LT(e, bound(c.dt)) << r.name;  // NaN (unwritten) fails too
  }
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LayerBackwardKernel,
    ::testing::Values(
        LayerCase{"packed_fp32", DType::kF32, {0, 0, 5, 5, 70, 90}, 90, 2, 4, 8, 8, 4},
        LayerCase{"short_seqs", DType::kF32, {0, 1, 3, 3, 6}, 6, 1, 2, 4, 4, 4},
        LayerCase{"tail", DType::kF32, {0, 3, 3, 8}, 11, 1, 4, 4, 4, 3},
        LayerCase{"single_bf16", DType::kBF16, {}, 130, 2, 4, 32, 32, 4},
        LayerCase{"packed_bf16", DType::kBF16, {0, 63, 63, 128}, 128, 2, 4, 32, 32, 4},
        LayerCase{"packed_fp16", DType::kF16, {0, 63, 63, 128}, 133, 2, 2, 32, 32, 4, false},
        LayerCase{"no_states", DType::kF32, {0, 40, 77}, 77, 2, 2, 8, 12, 2, true, false, false}),
    [](const auto& info) { return info.param.name; });

TEST(LayerBackwardKernelContract, TailTokensAreExactlyZeroWhateverTheyHold) {
  LayerCase c{"tail", DType::kBF16, {0, 9, 20}, 31, 2, 4, 8, 8, 4};
  Layer l(c);
  for (int64_t t = 20; t < c.T; ++t) {  // NaN in every tail input
    for (int64_t i = 0; i < l.D; ++i) store_from_float(l.qkv.data(), c.dt, t * l.D + i, NAN);
    for (int64_t i = 0; i < c.HV * c.V; ++i) {
      store_from_float(l.z.data(), c.dt, t * c.HV * c.V + i, NAN);
      store_from_float(l.dout.data(), c.dt, t * c.HV * c.V + i, NAN);
    }
    for (int64_t h = 0; h < c.HV; ++h) {
      store_from_float(l.a.data(), c.dt, t * c.HV + h, NAN);
      store_from_float(l.b.data(), c.dt, t * c.HV + h, NAN);
    }
  }
  LayerGrads g(l);
  ASSERT_TRUE(linear_attention_layer_backward(params(l, g)).ok());
  for (int64_t i = 20 * l.D; i < c.T * l.D; ++i) ASSERT_EQ(g.dqkv.at(i), 0.0) << i;
  for (int64_t i = 20 * c.HV * c.V; i < c.T * c.HV * c.V; ++i) ASSERT_EQ(g.dz.at(i), 0.0) << i;
  for (int64_t i = 20 * c.HV; i < c.T * c.HV; ++i) {
    ASSERT_EQ(g.da.at(i), 0.0) << i;
    ASSERT_EQ(g.db.at(i), 0.0) << i;
  }
  for (float x : g.dw.f32) ASSERT_TRUE(std::isfinite(x));
  for (float x : g.dalog.f32) ASSERT_TRUE(std::isfinite(x));
  for (float x : g.dnw.f32) ASSERT_TRUE(std::isfinite(x));
}

TEST(LayerBackwardKernelContract, SameBitsForEveryThreadCount) {
  LayerCase c{"threads", DType::kF32, {0, 200, 201, 700}, 700, 2, 4, 16, 16, 4};
  Layer l(c);
  LayerGrads one(l), many(l);
  ASSERT_TRUE(linear_attention_layer_backward(params(l, one, 1)).ok());
  ASSERT_TRUE(linear_attention_layer_backward(params(l, many, 3)).ok());
  EXPECT_EQ(one.dqkv.f32, many.dqkv.f32);
  EXPECT_EQ(one.dz.f32, many.dz.f32);
  EXPECT_EQ(one.da.f32, many.da.f32);
  EXPECT_EQ(one.dw.f32, many.dw.f32);
  EXPECT_EQ(one.dalog.f32, many.dalog.f32);
  EXPECT_EQ(one.ddt.f32, many.ddt.f32);
  EXPECT_EQ(one.dnw.f32, many.dnw.f32);
  EXPECT_EQ(one.ds0.f32, many.ds0.f32);
}

TEST(LayerBackwardKernelContract, NoLiveTokensHandsTheStateGradientsBack) {
  LayerCase c{"empty", DType::kF32, {0, 0, 0}, 4, 1, 2, 4, 4, 4};
  Layer l(c);
  const auto ref = l.oracle();
  LayerGrads g(l);
  ASSERT_TRUE(linear_attention_layer_backward(params(l, g)).ok());
  EXPECT_EQ(rel_rms(g.ds0, ref.dinitial_state), 0.0);
  EXPECT_EQ(rel_rms(g.dc0, ref.dinitial_conv_state), 0.0);
  for (int64_t i = 0; i < g.dqkv.size(); ++i) ASSERT_EQ(g.dqkv.at(i), 0.0);
  for (float x : g.dw.f32) ASSERT_EQ(x, 0.0f);
  for (float x : g.dnw.f32) ASSERT_EQ(x, 0.0f);
}

TEST(LayerBackwardKernelContract, RejectsWhatItCannotRun) {
  LayerCase c{"bad", DType::kF32, {0, 3, 5}, 5, 1, 2, 4, 4, 4};
  Layer l(c);
  LayerGrads g(l);
  LinearAttentionLayerBackwardParams p = params(l, g);
  p.forward.decode = true;
  EXPECT_EQ(linear_attention_layer_backward(p).code(), StatusCode::kUnsupported);
  p = params(l, g);
  std::vector<int64_t> past{0, 3, 6};
  p.forward.cu_seqlens = past.data();
  EXPECT_EQ(linear_attention_layer_backward(p).code(), StatusCode::kInvalidArgument);
  p = params(l, g);
  p.d_output = nullptr;
  EXPECT_EQ(linear_attention_layer_backward(p).code(), StatusCode::kInvalidArgument);
  for (float x : g.dw.f32) EXPECT_TRUE(std::isnan(x));  // nothing written
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
