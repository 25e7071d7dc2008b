// Tests of the LibTorch layer pieces (causal conv1d, gates, gated RMS norm) and of the composed
// linear-attention layer against the FP64 reference, on packed layouts with zero-length
// sequences and carried-in conv and recurrent states.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/torch/causal_conv1d.h"
#include "kernels/torch/gated_rms_norm.h"
#include "kernels/torch/gates.h"
#include "kernels/torch/linear_attention_layer.h"
#include "reference/causal_conv1d.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"
#include "reference/linear_attention_layer.h"
#include "reference/linear_attention_layer_backward.h"
#include "tests/kernels/torch/torch_test_util.h"

namespace deltacheck::kernels::torch {
namespace {

using test_util::compare;
using test_util::Comparison;
using test_util::cu_tensor;
using test_util::cu_vector;
using test_util::make_tensor;
using test_util::SplitMix64;
using test_util::to_doubles;

struct ConvCase {
  std::string name;
  std::vector<int64_t> lengths;
  int64_t channels = 24, width = 4;
  bool bias = true, initial_state = true;
  at::ScalarType dtype = at::kFloat;
};

class TorchConvVsReference : public ::testing::TestWithParam<ConvCase> {};

TEST_P(TorchConvVsReference, OutputAndFinalStateMatchFp64) {
  const ConvCase& c = GetParam();
  const std::vector<int64_t> cu = cu_vector(c.lengths);
  const int64_t T = cu.back(), D = c.channels, W = c.width;
  const int64_t N = static_cast<int64_t>(c.lengths.size());
  SplitMix64 rng(77 + W);
  const at::Tensor x = make_tensor({T, D}, c.dtype, [&] { return rng.normal(); });
  const at::Tensor w = make_tensor({D, W}, at::kFloat, [&] { return 0.5 * rng.normal(); });
  const at::Tensor bias = make_tensor({D}, at::kFloat, [&] { return 0.1 * rng.normal(); });
  const at::Tensor h0 = make_tensor({N, D, W - 1}, c.dtype, [&] { return rng.normal(); });

  const std::vector<double> xd = to_doubles(x), wd = to_doubles(w), bd = to_doubles(bias);
  const std::vector<double> h0d = to_doubles(h0);
  reference::CausalConv1dArgs args;
  args.seq_len = T;
  args.channels = D;
  args.width = W;
  args.x = xd.data();
  args.weight = wd.data();
  args.bias = c.bias ? bd.data() : nullptr;
  args.cu_seqlens = cu;
  args.initial_state = c.initial_state ? h0d.data() : nullptr;
  const reference::CausalConv1dResult ref = reference::causal_conv1d(args);

  const TorchConvResult got = causal_conv1d(
      x, w, c.bias ? std::optional<at::Tensor>(bias) : std::nullopt, cu_tensor(c.lengths, at::kInt),
      c.initial_state ? std::optional<at::Tensor>(h0) : std::nullopt);
  ASSERT_EQ(got.output.scalar_type(), c.dtype);
  const Comparison o = compare(got.output, ref.output);
  EXPECT_TRUE(o.finite);
  EXPECT_GT(o.ref_norm, 0.0);
  EXPECT_LT(o.rel_rms, c.dtype == at::kFloat ? 1e-6 : 5e-3);
  // The final conv state is a copy of inputs: exact.
  ASSERT_EQ(got.final_state.sizes(), (std::vector<int64_t>{N, D, W - 1}));
  EXPECT_EQ(compare(got.final_state, ref.final_state).max_abs, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TorchConvVsReference,
    ::testing::Values(ConvCase{"w4_3_0_5_1_state", {3, 0, 5, 1}},
                      ConvCase{"w4_0_9_2_0_zeros", {0, 9, 2, 0}, 24, 4, true, false},
                      ConvCase{"w2_7_1_nobias", {7, 1}, 16, 2, false, true},
                      ConvCase{"w1_4_4", {4, 4}, 8, 1, true, true},
                      ConvCase{"w4_bf16_6_2", {6, 2}, 24, 4, true, true, at::kBFloat16}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// The token right after a packed boundary must see zeros (or its own state), not its neighbour.
TEST(TorchConv, NeverReadsAcrossAPackedBoundary) {
  SplitMix64 rng(5);
  const at::Tensor x = make_tensor({12, 8}, at::kFloat, [&] { return rng.normal(); });
  const at::Tensor w = make_tensor({8, 4}, at::kFloat, [&] { return rng.normal(); });
  const TorchConvResult packed = causal_conv1d(x, w, std::nullopt, cu_tensor({5, 7}, at::kLong));
  const TorchConvResult alone = causal_conv1d(x.narrow(0, 5, 7), w);
  EXPECT_TRUE(at::equal(packed.output.narrow(0, 5, 7), alone.output));
  const TorchConvResult unpacked = causal_conv1d(x, w);  // one sequence: does read across
  EXPECT_FALSE(at::allclose(unpacked.output.narrow(0, 5, 7), alone.output));
}

TEST(TorchGates, MatchFp64) {
  const int64_t T = 37, HV = 6;
  SplitMix64 rng(11);
  const at::Tensor a = make_tensor({T, HV}, at::kFloat, [&] { return 8.0 * rng.normal(); });
  const at::Tensor b = make_tensor({T, HV}, at::kFloat, [&] { return 4.0 * rng.normal(); });
  const at::Tensor A_log = make_tensor({HV}, at::kFloat, [&] { return rng.uniform(-2.0, 2.5); });
  const at::Tensor dt_bias = make_tensor({HV}, at::kFloat, [&] { return rng.normal(); });
  const std::vector<double> ad = to_doubles(a), bd = to_doubles(b), Ad = to_doubles(A_log);
  const std::vector<double> dd = to_doubles(dt_bias);
  reference::GatesArgs args;
  args.num_tokens = T;
  args.num_value_heads = HV;
  args.a = ad.data();
  args.b = bd.data();
  args.A_log = Ad.data();
  args.dt_bias = dd.data();
  const reference::GatesResult ref = reference::gates(args);
  const TorchGates got = gdn_gates(a, b, A_log, dt_bias);
  ASSERT_EQ(got.g.scalar_type(), at::kFloat);
  const Comparison g = compare(got.g, ref.g), beta = compare(got.beta, ref.beta);
  EXPECT_GT(g.ref_norm, 0.0);
  EXPECT_LT(g.rel_rms, 1e-6);
  EXPECT_LT(beta.rel_rms, 1e-6);
  EXPECT_LE(got.g.max().item<float>(), 0.0f);
  // beta keeps b's dtype.
  EXPECT_EQ(gdn_gates(a, b.to(at::kBFloat16), A_log, dt_bias).beta.scalar_type(), at::kBFloat16);
}

TEST(TorchGatedRmsNorm, MatchesFp64) {
  const int64_t T = 9, HV = 3, V = 100;
  SplitMix64 rng(13);
  const at::Tensor x = make_tensor({T, HV, V}, at::kFloat, [&] { return rng.normal(); });
  const at::Tensor z = make_tensor({T, HV, V}, at::kFloat, [&] { return 2.0 * rng.normal(); });
  const at::Tensor w = make_tensor({V}, at::kFloat, [&] { return rng.uniform(0.5, 1.5); });
  const std::vector<double> xd = to_doubles(x), zd = to_doubles(z), wd = to_doubles(w);
  reference::GatedRmsNormArgs args;
  args.num_tokens = T;
  args.num_heads = HV;
  args.dim = V;
  args.x = xd.data();
  args.z = zd.data();
  args.weight = wd.data();
  args.eps = 1e-6;
  const std::vector<double> ref = reference::gated_rms_norm(args);
  const Comparison c = compare(gated_rms_norm(x, z, w, 1e-6), ref);
  EXPECT_GT(c.ref_norm, 0.0);
  EXPECT_LT(c.rel_rms, 1e-6);
  EXPECT_LT(compare(gated_rms_norm(x.to(at::kBFloat16), z, w, 1e-6), ref).rel_rms, 5e-3);
}

// The layer's inputs: a small Qwen3-Next-shaped problem (GVA 2, odd value dim) with states.
struct LayerInputs {
  int64_t H = 2, HV = 4, K = 32, V = 20, W = 4, T = 0, N = 0, D = 0;
  std::vector<int64_t> lengths;
  at::Tensor qkv, z, a, b, h0, conv_h0;
  LinearAttentionWeights weights;
};

LayerInputs make_layer_inputs(std::vector<int64_t> lengths, at::ScalarType dtype, uint64_t seed) {
  LayerInputs in;
  in.lengths = std::move(lengths);
  in.T = cu_vector(in.lengths).back();
  in.N = static_cast<int64_t>(in.lengths.size());
  in.D = 2 * in.H * in.K + in.HV * in.V;
  SplitMix64 rng(seed);
  auto normal = [&] { return rng.normal(); };
  in.qkv = make_tensor({in.T, in.D}, dtype, normal);
  in.z = make_tensor({in.T, in.HV, in.V}, dtype, normal);
  in.a = make_tensor({in.T, in.HV}, dtype, normal);
  in.b = make_tensor({in.T, in.HV}, dtype, normal);
  in.h0 = make_tensor({in.N, in.HV, in.K, in.V}, at::kFloat, [&] { return 0.3 * rng.normal(); });
  in.conv_h0 = make_tensor({in.N, in.D, in.W - 1}, dtype, normal);
  LinearAttentionWeights& w = in.weights;
  w.num_heads = in.H;
  w.num_value_heads = in.HV;
  w.key_dim = in.K;
  w.value_dim = in.V;
  w.conv_weight = make_tensor({in.D, in.W}, at::kFloat, [&] { return 0.5 * rng.normal(); });
  w.conv_bias = make_tensor({in.D}, at::kFloat, [&] { return 0.1 * rng.normal(); });
  w.A_log = make_tensor({in.HV}, at::kFloat, [&] { return rng.uniform(-1.0, 1.5); });
  w.dt_bias = make_tensor({in.HV}, at::kFloat, normal);
  w.norm_weight = make_tensor({in.V}, at::kFloat, [&] { return rng.uniform(0.5, 1.5); });
  return in;
}

// The FP64 reference's arguments for the inputs; `buffers` holds the values they point into.
reference::LinearAttentionLayerArgs layer_reference_args(
    const LayerInputs& in, std::vector<std::vector<double>>& buffers) {
  auto values = [&](const at::Tensor& t) { return buffers.emplace_back(to_doubles(t)).data(); };
  reference::LinearAttentionLayerArgs args;
  args.seq_len = in.T;
  args.num_heads = in.H;
  args.num_value_heads = in.HV;
  args.key_dim = in.K;
  args.value_dim = in.V;
  args.conv_width = in.W;
  args.qkv = values(in.qkv);
  args.z = values(in.z);
  args.a = values(in.a);
  args.b = values(in.b);
  args.conv_weight = values(in.weights.conv_weight);
  args.conv_bias = values(in.weights.conv_bias);
  args.A_log = values(in.weights.A_log);
  args.dt_bias = values(in.weights.dt_bias);
  args.norm_weight = values(in.weights.norm_weight);
  args.norm_eps = in.weights.norm_eps;
  args.cu_seqlens = cu_vector(in.lengths);
  args.initial_state = values(in.h0);
  args.initial_conv_state = values(in.conv_h0);
  return args;
}

reference::LinearAttentionLayerResult run_layer_reference(const LayerInputs& in) {
  std::vector<std::vector<double>> buffers;
  return reference::linear_attention_layer(layer_reference_args(in, buffers));
}

TorchLayerResult run_layer(const LayerInputs& in, GdrForm form) {
  return linear_attention_layer(in.qkv, in.z, in.a, in.b, in.weights,
                                cu_tensor(in.lengths, at::kInt), in.h0, in.conv_h0, form);
}

TEST(TorchLinearAttentionLayer, MatchesFp64OnPackedSequences) {
  const LayerInputs in = make_layer_inputs({63, 0, 65, 2}, at::kFloat, 21);
  const reference::LinearAttentionLayerResult ref = run_layer_reference(in);
  for (GdrForm form : {GdrForm::kChunked, GdrForm::kRecurrent}) {
    const TorchLayerResult got = run_layer(in, form);
    const Comparison o = compare(got.output, ref.output);
    const Comparison s = compare(got.final_state, ref.final_state);
    EXPECT_TRUE(o.finite && s.finite);
    EXPECT_GT(o.ref_norm, 0.0);
    EXPECT_LT(o.rel_rms, 1e-6);
    EXPECT_LT(s.rel_rms, 1e-6);
    EXPECT_EQ(compare(got.final_conv_state, ref.final_conv_state).max_abs, 0.0);
  }
}

TEST(TorchLinearAttentionLayer, Bf16InputsStayNearFp64) {
  const LayerInputs in = make_layer_inputs({40, 70}, at::kBFloat16, 22);
  const reference::LinearAttentionLayerResult ref = run_layer_reference(in);
  const TorchLayerResult got = run_layer(in, GdrForm::kChunked);
  ASSERT_EQ(got.output.scalar_type(), at::kBFloat16);
  // The conv output is rounded to bf16 before the rule, as the models do; the reference is not.
  EXPECT_LT(compare(got.output, ref.output).rel_rms, 1e-2);
  EXPECT_LT(compare(got.final_state, ref.final_state).rel_rms, 1e-2);
  EXPECT_EQ(compare(got.final_conv_state, ref.final_conv_state).max_abs, 0.0);
}

// Packing two sequences into one call gives what each gives alone (no conv or state leak).
TEST(TorchLinearAttentionLayer, PackedEqualsEachSequenceAlone) {
  const LayerInputs in = make_layer_inputs({30, 81}, at::kFloat, 23);
  const TorchLayerResult packed = run_layer(in, GdrForm::kChunked);
  int64_t start = 0;
  for (int64_t n = 0; n < in.N; ++n) {
    const int64_t len = in.lengths[n];
    const TorchLayerResult alone =
        linear_attention_layer(in.qkv.narrow(0, start, len), in.z.narrow(0, start, len),
                               in.a.narrow(0, start, len), in.b.narrow(0, start, len), in.weights,
                               std::nullopt, in.h0.narrow(0, n, 1), in.conv_h0.narrow(0, n, 1));
    EXPECT_LT(compare(packed.output.narrow(0, start, len), alone.output).rel_rms, 1e-6) << n;
    EXPECT_LT(compare(packed.final_state.narrow(0, n, 1), alone.final_state).rel_rms, 1e-6) << n;
    EXPECT_TRUE(at::equal(packed.final_conv_state.narrow(0, n, 1), alone.final_conv_state)) << n;
    start += len;
  }
}

// Prefill in two calls with carried conv and recurrent state equals one call (chunked prefill).
TEST(TorchLinearAttentionLayer, SplitPrefillWithCarriedStateEqualsOneShot) {
  LayerInputs in = make_layer_inputs({100}, at::kFloat, 24);
  const TorchLayerResult whole = run_layer(in, GdrForm::kChunked);
  const int64_t cut = 37;  // mid-chunk
  const TorchLayerResult first = linear_attention_layer(
      in.qkv.narrow(0, 0, cut), in.z.narrow(0, 0, cut), in.a.narrow(0, 0, cut),
      in.b.narrow(0, 0, cut), in.weights, std::nullopt, in.h0, in.conv_h0);
  const TorchLayerResult second = linear_attention_layer(
      in.qkv.narrow(0, cut, 100 - cut), in.z.narrow(0, cut, 100 - cut),
      in.a.narrow(0, cut, 100 - cut), in.b.narrow(0, cut, 100 - cut), in.weights, std::nullopt,
      first.final_state, first.final_conv_state, GdrForm::kRecurrent);
  EXPECT_LT(compare(at::cat({first.output, second.output}), whole.output).rel_rms, 1e-6);
  EXPECT_LT(compare(second.final_state, whole.final_state).rel_rms, 1e-6);
  EXPECT_TRUE(at::equal(second.final_conv_state, whole.final_conv_state));
}

// A decode step (one token per sequence) through causal_conv1d_update and the recurrence equals
// the prefill of the same tokens; the conv state bit for bit.
TEST(TorchLinearAttentionLayer, DecodeStepEqualsPrefillOfOneTokenSequences) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const LayerInputs in = make_layer_inputs({1, 1, 1, 1, 1}, dt, 26);
    const TorchLayerResult prefill = run_layer(in, GdrForm::kChunked);
    const TorchLayerResult decode = run_layer(in, GdrForm::kDecode);
    EXPECT_LT(compare(decode.output, prefill.output).rel_rms, dt == at::kFloat ? 1e-6 : 1e-2);
    EXPECT_LT(compare(decode.final_state, prefill.final_state).rel_rms, 1e-6);
    EXPECT_TRUE(at::equal(decode.final_conv_state, prefill.final_conv_state));
  }
  const LayerInputs two = make_layer_inputs({1, 2}, at::kFloat, 27);
  EXPECT_THROW(run_layer(two, GdrForm::kDecode), std::invalid_argument);
}

// causal_conv1d_update: the new state is the old one shifted by one with x appended; without a
// state it reads zeros.
TEST(TorchCausalConv1dUpdate, ShiftsTheStateByOneToken) {
  const LayerInputs in = make_layer_inputs({1, 1, 1}, at::kFloat, 28);
  const TorchConvResult r =
      causal_conv1d_update(in.qkv, in.weights.conv_weight, in.weights.conv_bias, in.conv_h0);
  const int64_t ctx = in.conv_h0.size(2);
  EXPECT_TRUE(at::equal(r.final_state.narrow(2, 0, ctx - 1), in.conv_h0.narrow(2, 1, ctx - 1)));
  EXPECT_TRUE(at::equal(r.final_state.narrow(2, ctx - 1, 1), in.qkv.unsqueeze(-1)));
  const TorchConvResult fresh = causal_conv1d_update(in.qkv, in.weights.conv_weight);
  const TorchConvResult prefill =
      causal_conv1d(in.qkv, in.weights.conv_weight, std::nullopt, cu_tensor({1, 1, 1}, at::kInt));
  EXPECT_LT(compare(fresh.output, prefill.output).rel_rms, 1e-6);
  EXPECT_THROW(causal_conv1d_update(in.qkv, in.weights.conv_weight, std::nullopt,
                                    in.conv_h0.narrow(2, 0, ctx - 1)),
               std::invalid_argument);
}

// LibTorch autograd of the chunked layer prefill (every piece recorded when an input requires
// gradients) gives the FP64 backward's gradients of every input, weight and initial state, dqkv
// through the conv included (a NoGradGuard in the conv once cut it off: issue #21).
TEST(TorchLinearAttentionLayer, AutogradMatchesTheFp64Backward) {
  LayerInputs in = make_layer_inputs({63, 0, 65, 2}, at::kFloat, 29);
  LinearAttentionWeights& w = in.weights;
  const std::vector<at::Tensor> leaves{
      in.qkv.requires_grad_(),  in.z.requires_grad_(),          in.a.requires_grad_(),
      in.b.requires_grad_(),    w.conv_weight.requires_grad_(), w.conv_bias.requires_grad_(),
      w.A_log.requires_grad_(), w.dt_bias.requires_grad_(),     w.norm_weight.requires_grad_(),
      in.h0.requires_grad_(),   in.conv_h0.requires_grad_()};
  SplitMix64 rng(30);
  auto normal = [&] { return rng.normal(); };
  const at::Tensor d_out = make_tensor({in.T, in.HV, in.V}, at::kFloat, normal);
  const at::Tensor d_ht = make_tensor({in.N, in.HV, in.K, in.V}, at::kFloat, normal);
  const at::Tensor d_conv = make_tensor({in.N, in.D, in.W - 1}, at::kFloat, normal);
  const TorchLayerResult out = run_layer(in, GdrForm::kChunked);
  const std::vector<at::Tensor> grads = ::torch::autograd::grad(
      {out.output, out.final_state, out.final_conv_state}, leaves, {d_out, d_ht, d_conv});

  std::vector<std::vector<double>> buffers;
  const std::vector<double> dod = to_doubles(d_out), dhd = to_doubles(d_ht);
  const std::vector<double> dcd = to_doubles(d_conv);
  const reference::LinearAttentionLayerGradients ref = reference::linear_attention_layer_backward(
      layer_reference_args(in, buffers), {dod.data(), dhd.data(), dcd.data()});
  const std::vector<double>* want[] = {&ref.dqkv,
                                       &ref.dz,
                                       &ref.da,
                                       &ref.db,
                                       &ref.dconv_weight,
                                       &ref.dconv_bias,
                                       &ref.dA_log,
                                       &ref.ddt_bias,
                                       &ref.dnorm_weight,
                                       &ref.dinitial_state,
                                       &ref.dinitial_conv_state};
  const char* names[] = {"dqkv",
                         "dz",
                         "da",
                         "db",
                         "dconv_weight",
                         "dconv_bias",
                         "dA_log",
                         "ddt_bias",
                         "dnorm_weight",
                         "dinitial_state",
                         "dinitial_conv_state"};
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Comparison c = compare(grads[i], *want[i]);
    EXPECT_TRUE(c.finite) << names[i];
    EXPECT_GT(c.ref_norm, 0.0) << names[i];
    EXPECT_LT(c.rel_rms, 2e-5) << names[i];
  }
}

// Without an input that requires gradients nothing is recorded (every piece runs under
// NoGradGuard), and recording changes no bit of the forward.
TEST(TorchLinearAttentionLayer, RecordingChangesNoBit) {
  LayerInputs in = make_layer_inputs({30, 0, 81}, at::kBFloat16, 31);
  const TorchLayerResult plain = run_layer(in, GdrForm::kChunked);
  EXPECT_FALSE(plain.output.requires_grad());
  EXPECT_FALSE(plain.final_conv_state.requires_grad());
  in.qkv.requires_grad_();
  in.weights.norm_weight.requires_grad_();
  const TorchLayerResult recorded = run_layer(in, GdrForm::kChunked);
  EXPECT_TRUE(recorded.output.requires_grad());
  EXPECT_TRUE(recorded.final_conv_state.requires_grad());
  EXPECT_TRUE(at::equal(plain.output, recorded.output.detach()));
  EXPECT_TRUE(at::equal(plain.final_state, recorded.final_state.detach()));
  EXPECT_TRUE(at::equal(plain.final_conv_state, recorded.final_conv_state.detach()));
}

TEST(TorchLinearAttentionLayer, InvalidShapesThrow) {
  const LayerInputs in = make_layer_inputs({5}, at::kFloat, 25);
  EXPECT_THROW(linear_attention_layer(in.qkv.narrow(1, 0, in.D - 1), in.z, in.a, in.b, in.weights),
               std::invalid_argument);
  EXPECT_THROW(linear_attention_layer(in.qkv, in.z.narrow(2, 0, 3), in.a, in.b, in.weights),
               std::invalid_argument);
  EXPECT_THROW(causal_conv1d(in.qkv, in.weights.conv_weight, std::nullopt, std::nullopt,
                             in.conv_h0.narrow(2, 0, 2)),
               std::invalid_argument);
  EXPECT_THROW(gdn_gates(in.a, in.b, in.weights.A_log.narrow(0, 0, 2), in.weights.dt_bias),
               std::invalid_argument);
  EXPECT_THROW(gated_rms_norm(in.z, in.z, in.weights.norm_weight.narrow(0, 0, 3)),
               std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::kernels::torch
