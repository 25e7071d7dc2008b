// Tests of the LibTorch gated delta rule (chunked and recurrent) against the FP64 reference on
// packed layouts that break leaking or NaN-prone implementations: zero-length sequences, tails
// with T % 64 != 0 under strong decay, GVA, odd head dims, carried-in states, bf16 inputs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/torch/gated_delta_rule.h"
#include "reference/gated_delta_rule.h"
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

enum class Gate { kStrong, kWeak, kZero };

struct GdrCase {
  std::string name;
  std::vector<int64_t> lengths;  // packed sequences (B = 1, cu_seqlens); empty: batched mode
  int64_t batch = 1;             // batched mode only: B sequences of seq_len tokens
  int64_t seq_len = 0;
  int64_t heads = 1, value_heads = 1, key_dim = 64, value_dim = 64;
  Gate gate = Gate::kStrong;
  bool initial_state = false;
  bool l2norm = true;
  at::ScalarType dtype = at::kFloat;
  at::ScalarType cu_dtype = at::kInt;
  uint64_t seed = 1;
};

struct Inputs {
  at::Tensor q, k, v, g, beta, h0;  // h0 undefined without initial state
  std::optional<at::Tensor> cu;
  std::vector<int64_t> cu_host;  // empty in batched mode
  int64_t batch = 1, seq_len = 0;
};

Inputs make_inputs(const GdrCase& c) {
  Inputs in;
  if (c.lengths.empty()) {
    in.batch = c.batch;
    in.seq_len = c.seq_len;
  } else {
    in.cu_host = cu_vector(c.lengths);
    in.seq_len = in.cu_host.back();
    in.cu = cu_tensor(c.lengths, c.cu_dtype);
  }
  const int64_t B = in.batch, T = in.seq_len, N = c.lengths.empty() ? B : c.lengths.size();
  const int64_t H = c.heads, HV = c.value_heads, K = c.key_dim, V = c.value_dim;
  SplitMix64 rng(c.seed);
  // Without the in-kernel L2 norm, keys of norm about 1 keep beta * |k|^2 < 2 (a stable rule).
  const double key_scale = c.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(K));
  in.q = make_tensor({B, T, H, K}, c.dtype, [&] { return rng.normal(); });
  in.k = make_tensor({B, T, H, K}, c.dtype, [&] { return key_scale * rng.normal(); });
  in.v = make_tensor({B, T, HV, V}, c.dtype, [&] { return rng.normal(); });
  in.g = make_tensor({B, T, HV}, at::kFloat, [&] {
    switch (c.gate) {
      case Gate::kStrong:
        return rng.uniform(-20.0, -1e-4);
      case Gate::kWeak:
        return rng.uniform(-0.05, 0.0);
      case Gate::kZero:
        return 0.0;
    }
    return 0.0;
  });
  in.beta = make_tensor({B, T, HV}, c.dtype, [&] { return rng.uniform(0.02, 0.98); });
  if (c.initial_state) {
    in.h0 = make_tensor({N, HV, K, V}, at::kFloat, [&] { return 0.5 * rng.normal(); });
  }
  return in;
}

reference::GatedDeltaRuleResult run_reference(const GdrCase& c, const Inputs& in) {
  const std::vector<double> q = to_doubles(in.q), k = to_doubles(in.k), v = to_doubles(in.v);
  const std::vector<double> g = to_doubles(in.g), beta = to_doubles(in.beta);
  std::vector<double> h0;
  reference::GatedDeltaRuleArgs args;
  args.batch = in.batch;
  args.seq_len = in.seq_len;
  args.num_heads = c.heads;
  args.num_value_heads = c.value_heads;
  args.key_dim = c.key_dim;
  args.value_dim = c.value_dim;
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
  args.g = g.data();
  args.beta = beta.data();
  args.cu_seqlens = in.cu_host;
  if (in.h0.defined()) {
    h0 = to_doubles(in.h0);
    args.initial_state = h0.data();
  }
  args.use_qk_l2norm = c.l2norm;
  return reference::gated_delta_rule(args);
}

std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

TorchGdrResult run_chunked(const GdrCase& c, const Inputs& in, int64_t chunk_size = 64) {
  return chunked_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, in.cu, optional_tensor(in.h0),
                                  0.0, c.l2norm, chunk_size, true);
}

TorchGdrResult run_recurrent(const GdrCase& c, const Inputs& in) {
  return recurrent_gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, in.cu, optional_tensor(in.h0),
                                    0.0, c.l2norm, true);
}

class TorchGdrVsReference : public ::testing::TestWithParam<GdrCase> {};

TEST_P(TorchGdrVsReference, ChunkedAndRecurrentMatchFp64) {
  const GdrCase& c = GetParam();
  const Inputs in = make_inputs(c);
  const reference::GatedDeltaRuleResult ref = run_reference(c, in);
  const TorchGdrResult chunked = run_chunked(c, in);
  const TorchGdrResult recurrent = run_recurrent(c, in);

  ASSERT_EQ(chunked.output.scalar_type(), c.dtype);
  ASSERT_EQ(chunked.final_state.scalar_type(), at::kFloat);
  const Comparison co = compare(chunked.output, ref.output);
  const Comparison cs = compare(chunked.final_state, ref.final_state);
  const Comparison ro = compare(recurrent.output, ref.output);
  const Comparison rs = compare(recurrent.final_state, ref.final_state);
  std::printf("  %-28s chunked o %.2e S %.2e | recurrent o %.2e S %.2e\n", c.name.c_str(),
              co.rel_rms, cs.rel_rms, ro.rel_rms, rs.rel_rms);
  for (const Comparison* x : {&co, &cs, &ro, &rs}) {
    EXPECT_TRUE(x->finite);
    EXPECT_GT(x->ref_norm, 0.0) << "degenerate reference";
  }
  // The states are fp32 whatever the input dtype; the output is rounded to the input dtype.
  const double out_tol = c.dtype == at::kFloat ? 1e-6 : 5e-3;
  EXPECT_LT(co.rel_rms, out_tol);
  EXPECT_LT(ro.rel_rms, out_tol);
  EXPECT_LT(cs.rel_rms, 1e-6);
  EXPECT_LT(rs.rel_rms, 1e-6);
  // The chunked form may be at most about twice as far from FP64 as the plain recurrence in the
  // same precision, plus a floor.
  EXPECT_LT(co.rel_rms, 2.0 * ro.rel_rms + 2e-6);
  EXPECT_LT(cs.rel_rms, 2.0 * rs.rel_rms + 2e-6);
}

std::vector<GdrCase> cases() {
  std::vector<GdrCase> v;
  auto add = [&](std::string name, std::vector<int64_t> lengths, int64_t H, int64_t HV, int64_t K,
                 int64_t V, Gate gate, bool h0, at::ScalarType dtype) {
    GdrCase c;
    c.name = std::move(name);
    c.lengths = std::move(lengths);
    c.heads = H;
    c.value_heads = HV;
    c.key_dim = K;
    c.value_dim = V;
    c.gate = gate;
    c.initial_state = h0;
    c.dtype = dtype;
    c.seed = 1000 + v.size();
    v.push_back(c);
    return &v.back();
  };
  const auto f32 = at::kFloat, bf16 = at::kBFloat16;
  add("fp32_63_0_65_strong_h0", {63, 0, 65}, 1, 1, 64, 64, Gate::kStrong, true, f32);
  add("fp32_1_64_129_gva2_weak", {1, 64, 129}, 2, 4, 64, 64, Gate::kWeak, false, f32);
  add("fp32_200_gva4_k60_v100_h0", {200}, 1, 4, 60, 100, Gate::kStrong, true, f32);
  add("fp32_0_17_0_zero_ends", {0, 17, 0}, 2, 2, 64, 64, Gate::kWeak, true, f32);
  add("fp32_0_0_70_0_k100_v60", {0, 0, 70, 0}, 1, 2, 100, 60, Gate::kStrong, false, f32);
  add("fp32_130_zero_gate", {130}, 1, 1, 64, 64, Gate::kZero, true, f32);
  add("fp32_127_1_2_no_l2norm", {127, 1, 2}, 2, 2, 64, 64, Gate::kWeak, true, f32)->l2norm = false;
  add("fp32_int64_cu_15_16_65", {15, 16, 65}, 1, 2, 64, 64, Gate::kStrong, true, f32)->cu_dtype =
      at::kLong;
  add("bf16_63_0_65_gva2_h0", {63, 0, 65}, 1, 2, 64, 64, Gate::kStrong, true, bf16);
  add("bf16_1_64_129_k60_v100", {1, 64, 129}, 2, 2, 60, 100, Gate::kWeak, false, bf16);
  add("fp16_100_gva4", {100}, 1, 4, 64, 64, Gate::kWeak, true, at::kHalf);
  GdrCase* b = add("fp32_batched_b2_t70", {}, 1, 2, 64, 64, Gate::kStrong, true, f32);
  b->batch = 2;
  b->seq_len = 70;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TorchGdrVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GdrCase>& info) {
                           return info.param.name;
                         });

// Strong decay over long tails drives the cumulative decay of a chunk far below fp32's range;
// a kernel forming exp(G_i) * exp(-G_j) turns that into inf * 0 = NaN.
TEST(TorchGdr, StrongDecayTailChunksStayFinite) {
  GdrCase c;
  c.lengths = {100, 37};
  c.value_heads = 2;
  c.heads = 2;
  c.gate = Gate::kZero;
  Inputs in = make_inputs(c);
  in.g.fill_(-20.0);  // cumulative decay over a chunk reaches -1280: exp underflows to 0
  const reference::GatedDeltaRuleResult ref = run_reference(c, in);
  const TorchGdrResult out = run_chunked(c, in);
  EXPECT_TRUE(at::isfinite(out.output).all().item<bool>());
  EXPECT_TRUE(at::isfinite(out.final_state).all().item<bool>());
  EXPECT_LT(compare(out.output, ref.output).rel_rms, 1e-6);
  EXPECT_LT(compare(out.final_state, ref.final_state).rel_rms, 1e-6);
}

// Two sequences packed into one row must give what each gives alone: no state leaks across the
// boundary, in either direction.
TEST(TorchGdr, PackedEqualsEachSequenceAlone) {
  GdrCase c;
  c.lengths = {77, 90};
  c.heads = 1;
  c.value_heads = 2;
  c.initial_state = true;
  c.gate = Gate::kWeak;
  const Inputs in = make_inputs(c);
  const TorchGdrResult packed = run_chunked(c, in);
  int64_t start = 0;
  for (int64_t n = 0; n < 2; ++n) {
    const int64_t len = c.lengths[n];
    const TorchGdrResult alone = chunked_gated_delta_rule(
        in.q.narrow(1, start, len), in.k.narrow(1, start, len), in.v.narrow(1, start, len),
        in.g.narrow(1, start, len), in.beta.narrow(1, start, len), std::nullopt,
        in.h0.narrow(0, n, 1), 0.0, true, 64, true);
    EXPECT_LT(compare(packed.output.narrow(1, start, len), alone.output).rel_rms, 1e-6) << n;
    EXPECT_LT(compare(packed.final_state.narrow(0, n, 1), alone.final_state).rel_rms, 1e-6) << n;
    start += len;
  }
}

// Changing one sequence's inputs must not move any other sequence's output or state.
TEST(TorchGdr, PerturbingOneSequenceLeavesTheOthers) {
  GdrCase c;
  c.lengths = {65, 64, 30};
  c.value_heads = 2;
  c.initial_state = true;
  c.gate = Gate::kWeak;
  const Inputs in = make_inputs(c);
  Inputs perturbed = in;
  perturbed.v = in.v.clone();
  perturbed.v.narrow(1, 65, 64).mul_(-3.0);  // the middle sequence
  perturbed.h0 = in.h0.clone();
  perturbed.h0.narrow(0, 1, 1).add_(1.0);
  for (bool chunked : {true, false}) {
    const TorchGdrResult a = chunked ? run_chunked(c, in) : run_recurrent(c, in);
    const TorchGdrResult b = chunked ? run_chunked(c, perturbed) : run_recurrent(c, perturbed);
    EXPECT_LT(compare(a.output.narrow(1, 0, 65), b.output.narrow(1, 0, 65)).rel_rms, 1e-6);
    EXPECT_LT(compare(a.output.narrow(1, 129, 30), b.output.narrow(1, 129, 30)).rel_rms, 1e-6);
    EXPECT_LT(compare(a.final_state.narrow(0, 0, 1), b.final_state.narrow(0, 0, 1)).rel_rms, 1e-6);
    EXPECT_LT(compare(a.final_state.narrow(0, 2, 1), b.final_state.narrow(0, 2, 1)).rel_rms, 1e-6);
    // ... while the perturbed sequence itself does move (the check above can fail).
    EXPECT_GT(compare(a.output.narrow(1, 65, 64), b.output.narrow(1, 65, 64)).rel_rms, 0.1);
  }
}

// The chunk size is an implementation detail: results must not depend on it beyond rounding.
TEST(TorchGdr, ChunkSizeDoesNotChangeTheResult) {
  GdrCase c;
  c.lengths = {50, 0, 97};
  c.value_heads = 2;
  c.initial_state = true;
  const Inputs in = make_inputs(c);
  const TorchGdrResult c64 = run_chunked(c, in, 64);
  for (int64_t chunk : {1, 16, 33, 128}) {
    const TorchGdrResult other = run_chunked(c, in, chunk);
    EXPECT_LT(compare(other.output, c64.output).rel_rms, 1e-5) << chunk;
    EXPECT_LT(compare(other.final_state, c64.final_state).rel_rms, 1e-5) << chunk;
  }
}

// Zero-length sequences pass their initial state through untouched; an all-empty batch works.
TEST(TorchGdr, EmptySequencesKeepTheirInitialState) {
  GdrCase c;
  c.lengths = {0, 5, 0};
  c.initial_state = true;
  const Inputs in = make_inputs(c);
  for (bool chunked : {true, false}) {
    const TorchGdrResult r = chunked ? run_chunked(c, in) : run_recurrent(c, in);
    EXPECT_TRUE(at::equal(r.final_state.narrow(0, 0, 1), in.h0.narrow(0, 0, 1)));
    EXPECT_TRUE(at::equal(r.final_state.narrow(0, 2, 1), in.h0.narrow(0, 2, 1)));
    EXPECT_FALSE(at::equal(r.final_state.narrow(0, 1, 1), in.h0.narrow(0, 1, 1)));
  }
  c.lengths = {0, 0};
  const Inputs empty = make_inputs(c);
  const TorchGdrResult r = run_chunked(c, empty);
  EXPECT_EQ(r.output.sizes(), (std::vector<int64_t>{1, 0, 1, 64}));
  EXPECT_TRUE(at::equal(r.final_state, empty.h0));
  EXPECT_FALSE(chunked_gated_delta_rule(empty.q, empty.k, empty.v, empty.g, empty.beta, empty.cu,
                                        std::nullopt, 0.0, true, 64, false)
                   .final_state.defined());
}

// One decode step on a slot-addressed pool with padding entries: each real entry equals the
// recurrence from its pool row (bit for bit: the same kernel on the gathered rows), padding entries
// are skipped (zero output) and rows nobody addresses stay bit-identical.
TEST(TorchGdr, PooledDecodeSkipsPaddingAndLeavesOtherRows) {
  GdrCase c;
  c.batch = 6;
  c.seq_len = 1;
  c.heads = 1;
  c.value_heads = 2;
  c.key_dim = 16;
  c.value_dim = 8;
  const Inputs in = make_inputs(c);
  const at::Tensor pool_before = make_tensor(
      {9, 2, 16, 8}, at::kFloat, [rng = SplitMix64(5)]() mutable { return rng.normal(); });
  const std::vector<int32_t> slot_values = {7, -1, 0, 3, -1, 5};
  at::Tensor slots = at::empty({6}, at::kInt);
  std::copy(slot_values.begin(), slot_values.end(), slots.data_ptr<int32_t>());
  at::Tensor pool = pool_before.clone();
  const at::Tensor o =
      recurrent_decode_pooled(in.q, in.k, in.v, in.g, in.beta, pool, slots, 0.0, c.l2norm);
  ASSERT_EQ(o.sizes(), in.v.sizes());
  std::vector<bool> used(9, false);
  for (int64_t i = 0; i < 6; ++i) {
    const int32_t s = slot_values[i];
    if (s < 0) {
      EXPECT_EQ(o.narrow(0, i, 1).abs().max().item<float>(), 0.0f) << "padding entry " << i;
      continue;
    }
    used[s] = true;
    auto one = [&](const at::Tensor& x) { return x.narrow(0, i, 1); };
    const TorchGdrResult want =
        recurrent_gated_delta_rule(one(in.q), one(in.k), one(in.v), one(in.g), one(in.beta),
                                   std::nullopt, pool_before.narrow(0, s, 1), 0.0, c.l2norm, true);
    EXPECT_TRUE(at::equal(one(o), want.output)) << "entry " << i;
    EXPECT_TRUE(at::equal(pool.narrow(0, s, 1), want.final_state)) << "entry " << i;
  }
  for (int64_t r = 0; r < 9; ++r) {
    if (used[r]) continue;
    EXPECT_TRUE(at::equal(pool.narrow(0, r, 1), pool_before.narrow(0, r, 1))) << r;
  }
  // Two entries on one row, or a row past the pool: rejected, nothing written.
  at::Tensor shared = slots.clone();
  shared[1] = 7;
  at::Tensor untouched = pool_before.clone();
  EXPECT_THROW(recurrent_decode_pooled(in.q, in.k, in.v, in.g, in.beta, untouched, shared),
               std::invalid_argument);
  shared[1] = 9;
  EXPECT_THROW(recurrent_decode_pooled(in.q, in.k, in.v, in.g, in.beta, untouched, shared),
               std::invalid_argument);
  EXPECT_TRUE(at::equal(untouched, pool_before));
}

TEST(TorchGdr, InvalidShapesThrowOneLineErrors) {
  GdrCase c;
  c.lengths = {3, 4};
  c.heads = 2;
  c.value_heads = 2;
  c.key_dim = 8;
  c.value_dim = 8;
  const Inputs in = make_inputs(c);
  auto call = [&](const at::Tensor& q, const at::Tensor& v, const std::optional<at::Tensor>& cu,
                  const std::optional<at::Tensor>& h0) {
    return chunked_gated_delta_rule(q, in.k.narrow(2, 0, q.size(2)), v, in.g, in.beta, cu, h0);
  };
  auto expect_error = [](auto f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  // HV = 2 is not a multiple of H = 3: make a q/k with three heads.
  const at::Tensor q3 = at::zeros({1, 7, 3, 8});
  expect_error([&] { chunked_gated_delta_rule(q3, q3, in.v, in.g, in.beta, in.cu); },
               "multiple of heads");
  expect_error([&] { call(in.q, in.v.narrow(3, 0, 4).narrow(1, 0, 6), in.cu, std::nullopt); },
               "v has shape");
  expect_error(
      [&] {
        call(in.q, in.v, at::tensor({0, 3, 6}, at::kInt), std::nullopt);
      },
      "ends at 6");
  expect_error(
      [&] {
        call(in.q, in.v, at::tensor({0, 5, 4, 7}, at::kInt), std::nullopt);
      },
      "decreases");
  expect_error([&] { call(in.q, in.v, at::tensor({1, 7}, at::kInt), std::nullopt); }, "start at 0");
  expect_error([&] { call(in.q, in.v, at::tensor({0.0f, 7.0f}), std::nullopt); }, "int32 or int64");
  expect_error([&] { call(in.q, in.v, in.cu, at::zeros({3, 2, 8, 8})); }, "initial_state");
  expect_error(
      [&] {
        recurrent_gated_delta_rule(in.q.expand({2, 7, 2, 8}), in.k.expand({2, 7, 2, 8}),
                                   in.v.expand({2, 7, 2, 8}), in.g.expand({2, 7, 2}),
                                   in.beta.expand({2, 7, 2}), in.cu);
      },
      "B == 1");
}

}  // namespace
}  // namespace deltacheck::kernels::torch
