// The composed CPU linear-attention layer against the FP64 reference: packed calls in place on the
// recurrent and conv-state pools, two calls against one, decode steps, and a rejected call that
// writes nothing (layer_kernels_testbed.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/linear_attention_layer.h"
#include "reference/linear_attention_layer.h"
#include "tests/kernels/cpu/layer_kernels_testbed.h"

namespace deltacheck::kernels::cpu {
namespace {

namespace ref = deltacheck::reference;
using namespace layer_testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---------------------------------------------------------------------------------------------
// the layer

struct LayerProblem {
  int64_t H = 2, HV = 4, K = 16, V = 12, W = 4;
  int64_t D() const { return 2 * H * K + HV * V; }
  DType dt;
  TokenSource src{700};
  std::vector<double> conv_weight = weights(20, D() * W, -0.8, 0.8),
                      conv_bias = weights(21, D(), -0.2, 0.2), A_log = weights(22, HV, -1.5, 0.5),
                      dt_bias = weights(23, HV, -1.0, 1.0), norm_weight = weights(24, V, 0.5, 1.5);
  std::vector<float> conv_weight_f = to_float(conv_weight), conv_bias_f = to_float(conv_bias),
                     A_log_f = to_float(A_log), dt_bias_f = to_float(dt_bias),
                     norm_weight_f = to_float(norm_weight);

  struct Inputs {
    std::vector<double> qkv, z, a, b;
  };
  Inputs inputs(const std::vector<TokenRef>& t) const {
    return {gather(src, kQkv, t, D(), -2.0, 2.0, dt), gather(src, kZ, t, HV * V, -2.0, 2.0, dt),
            gather(src, kA, t, HV, -3.0, 3.0, dt), gather(src, kB, t, HV, -3.0, 3.0, dt)};
  }

  ref::LinearAttentionLayerResult reference(const Inputs& in, const std::vector<int64_t>& cu,
                                            const std::vector<double>& state,
                                            const std::vector<double>& conv_state) const {
    ref::LinearAttentionLayerArgs a;
    a.seq_len = cu.back();
    a.num_heads = H;
    a.num_value_heads = HV;
    a.key_dim = K;
    a.value_dim = V;
    a.conv_width = W;
    a.qkv = in.qkv.data();
    a.z = in.z.data();
    a.a = in.a.data();
    a.b = in.b.data();
    a.conv_weight = conv_weight.data();
    a.conv_bias = conv_bias.data();
    a.A_log = A_log.data();
    a.dt_bias = dt_bias.data();
    a.norm_weight = norm_weight.data();
    a.cu_seqlens = cu;
    a.initial_state = state.data();
    a.initial_conv_state = conv_state.data();
    return ref::linear_attention_layer(a);
  }

  // Runs the kernel in place on the two pools; returns the output buffer.
  Buffer run(const Inputs& in, const std::vector<int64_t>& cu, const std::vector<int32_t>& slots,
             Pool& states, Pool& conv_states, int64_t chunk_size, bool decode = false) const {
    Status st;
    Buffer out = call(in, cu, slots, states, conv_states, chunk_size, decode, st);
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }

  Buffer call(const Inputs& in, const std::vector<int64_t>& cu, const std::vector<int32_t>& slots,
              Pool& states, Pool& conv_states, int64_t chunk_size, bool decode, Status& st) const {
    const int64_t T = cu.back();
    const Buffer qkv = Buffer::of(in.qkv, dt), z = Buffer::of(in.z, dt), a = Buffer::of(in.a, dt),
                 b = Buffer::of(in.b, dt);
    Buffer out = Buffer::poisoned(T * HV * V, dt);
    LinearAttentionLayerParams p;
    p.seq_len = T;
    p.num_heads = H;
    p.num_value_heads = HV;
    p.key_dim = K;
    p.value_dim = V;
    p.conv_width = W;
    p.dtype = dt;
    p.qkv = qkv.data();
    p.z = z.data();
    p.a = a.data();
    p.b = b.data();
    p.conv_weight = conv_weight_f.data();
    p.conv_bias = conv_bias_f.data();
    p.A_log = A_log_f.data();
    p.dt_bias = dt_bias_f.data();
    p.norm_weight = norm_weight_f.data();
    p.out = out.data();
    p.cu_seqlens = cu.data();
    p.num_seqs = static_cast<int64_t>(cu.size()) - 1;
    p.initial_state = p.final_state = states.data.data();
    p.initial_conv_state = p.final_conv_state = conv_states.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = states.rows;
    p.chunk_size = chunk_size;
    p.decode = decode;
    p.num_threads = 2;
    st = linear_attention_layer(p);
    return out;
  }
};

// Tolerance of the composed layer, relative to the largest reference value of each tensor. Its
// intermediates are rounded to the activation dtype between steps (as the model does), so for
// bf16 / fp16 the error is several roundings deep (measured: about 6e-3 and 7e-4 of the largest
// value, 3e-7 for fp32); the bounds are still far below what a leak or a lost state gives.
double layer_rtol(DType dt) {
  switch (dt) {
    case DType::kF32:
      return 1e-5;
    case DType::kBF16:
      return 2.5e-2;
    case DType::kF16:
      return 3e-3;
    default:
      break;
  }
  return 0.0;
}

// Each real sequence's output and pool rows against the reference (the conv state exactly);
// padding entries' outputs unwritten.
void expect_pools_match(const LayerProblem& pr, const ref::LinearAttentionLayerResult& want,
                        const Buffer& out, const std::vector<int64_t>& cu,
                        const std::vector<int32_t>& slots, const Pool& states, const Pool& conv) {
  const int64_t SS = pr.HV * pr.K * pr.V, CS = pr.D() * (pr.W - 1), row = pr.HV * pr.V;
  const double rtol = layer_rtol(pr.dt);
  const double scale = max_abs(want.output), state_scale = max_abs(want.final_state);
  ASSERT_GT(scale, 0.05);
  ASSERT_GT(state_scale, 0.05);
  for (size_t n = 0; n < slots.size(); ++n) {
    const int64_t b = cu[n] * row, e = cu[n + 1] * row;
    if (slots[n] < 0) {
      EXPECT_TRUE(all_nan(out, b, e)) << "padding entry " << n << " wrote output";
      continue;
    }
    EXPECT_TRUE(close("output", read(out, b, e), slice(want.output, b, e), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("state", read(states.data, slots[n] * SS, (slots[n] + 1) * SS),
                      slice(want.final_state, n * SS, (n + 1) * SS), rtol * state_scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("conv state", read(conv.data, slots[n] * CS, (slots[n] + 1) * CS),
                      slice(want.final_conv_state, n * CS, (n + 1) * CS), 0.0, 0.0))
        << "sequence " << n;
  }
}

// One call in place on the two pools with padding entries equals the reference (the conv state
// exactly); padding entries and rows nobody addresses are not touched.
void expect_pooled_call_matches(DType dt, const std::vector<int64_t>& lens,
                                const std::vector<int32_t>& slots, int64_t rows, int64_t chunk_size,
                                bool decode) {
  LayerProblem pr;
  pr.dt = dt;
  const int64_t N = static_cast<int64_t>(lens.size());
  const Packing pk = pack(std::vector<int64_t>(N, 0), lens);
  const LayerProblem::Inputs in = pr.inputs(pk.tokens);
  // Recurrent states of a realistic size: the rule's own fixed points are O(1).
  Pool states_before(rows, pr.HV * pr.K * pr.V, 30), conv_before(rows, pr.D() * (pr.W - 1), 31);
  for (float& x : states_before.data) x *= 0.5f;
  for (float& x : conv_before.data) x = static_cast<float>(round_to(2.0 * x, pr.dt));
  Pool states = states_before, conv = conv_before;
  const ref::LinearAttentionLayerResult want =
      pr.reference(in, pk.cu, states_before.gather(slots), conv_before.gather(slots));
  const Buffer out = pr.run(in, pk.cu, slots, states, conv, chunk_size, decode);
  expect_pools_match(pr, want, out, pk.cu, slots, states, conv);
  expect_untouched_rows(states_before, states, slots);
  expect_untouched_rows(conv_before, conv, slots);
}

class LinearAttentionLayerKernel : public ::testing::TestWithParam<DType> {};

TEST_P(LinearAttentionLayerKernel, PackedWithPoolsMatchesReference) {
  expect_pooled_call_matches(GetParam(), {0, 40, 1, 0, 17, 5, 23, 0}, {0, 5, 2, 7, -1, 3, 1, 6},
                             /*rows=*/9, /*chunk_size=*/16, /*decode=*/false);
}

// Chunked prefill through the pools: two calls split mid-chunk (and inside the conv window) ==
// the reference in one call.
TEST_P(LinearAttentionLayerKernel, TwoCallsThroughPoolsEqualOneCall) {
  LayerProblem pr;
  pr.dt = GetParam();
  const std::vector<int64_t> lens = {29, 2, 0}, split = {11, 1, 0};
  const std::vector<int32_t> slots = {2, 0, 1};
  const int64_t N = static_cast<int64_t>(lens.size());
  const int64_t SS = pr.HV * pr.K * pr.V, CS = pr.D() * (pr.W - 1), row = pr.HV * pr.V;
  Pool states(3, SS, 40), conv(3, CS, 41);
  std::fill(states.data.begin(), states.data.end(), 0.0f);
  std::fill(conv.data.begin(), conv.data.end(), 0.0f);

  const Packing whole = pack(std::vector<int64_t>(N, 0), lens);
  const ref::LinearAttentionLayerResult want =
      pr.reference(pr.inputs(whole.tokens), whole.cu, std::vector<double>(N * SS, 0.0),
                   std::vector<double>(N * CS, 0.0));
  const Packing first = pack(std::vector<int64_t>(N, 0), split), second = pack(split, lens);
  const Buffer out1 = pr.run(pr.inputs(first.tokens), first.cu, slots, states, conv, 8);
  const Buffer out2 = pr.run(pr.inputs(second.tokens), second.cu, slots, states, conv, 8);

  const double rtol = layer_rtol(pr.dt);
  const double scale = max_abs(want.output), state_scale = max_abs(want.final_state);
  ASSERT_GT(scale, 0.05);
  ASSERT_GT(state_scale, 0.05);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t at = whole.cu[n] * row;
    const int64_t n1 = (first.cu[n + 1] - first.cu[n]) * row;
    const int64_t n2 = (second.cu[n + 1] - second.cu[n]) * row;
    EXPECT_TRUE(close("first call", read(out1, first.cu[n] * row, first.cu[n] * row + n1),
                      slice(want.output, at, at + n1), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("second call", read(out2, second.cu[n] * row, second.cu[n] * row + n2),
                      slice(want.output, at + n1, at + n1 + n2), rtol * scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("state", read(states.data, slots[n] * SS, (slots[n] + 1) * SS),
                      slice(want.final_state, n * SS, (n + 1) * SS), rtol * state_scale, rtol))
        << "sequence " << n;
    EXPECT_TRUE(close("conv state", read(conv.data, slots[n] * CS, (slots[n] + 1) * CS),
                      slice(want.final_conv_state, n * CS, (n + 1) * CS), 0.0, 0.0))
        << "sequence " << n;
  }
}

// A decode step (one token per sequence: causal_conv1d_update and recurrent_decode) in place on
// the pools, with padding entries.
TEST_P(LinearAttentionLayerKernel, DecodeStepThroughPoolsMatchesReference) {
  expect_pooled_call_matches(GetParam(), {1, 1, 1, 1, 1, 1}, {4, -1, 0, 6, -1, 2}, /*rows=*/7,
                             /*chunk_size=*/64, /*decode=*/true);
}

INSTANTIATE_TEST_SUITE_P(Types, LinearAttentionLayerKernel, kAllTypes, dtype_name);

// decode takes one token per sequence: a call with a longer (or empty) sequence is rejected
// before any state is touched.
TEST(LinearAttentionLayerKernelArgs, DecodeRejectsSequencesOfOtherLengths) {
  LayerProblem pr;
  pr.dt = DType::kF32;
  for (const std::vector<int64_t>& lens : std::vector<std::vector<int64_t>>{{1, 2}, {1, 0, 1}}) {
    const std::vector<int32_t> slots = {0, 1, 2};
    const Packing pk = pack(std::vector<int64_t>(lens.size(), 0), lens);
    const Pool states_before(3, pr.HV * pr.K * pr.V, 70), conv_before(3, pr.D() * (pr.W - 1), 71);
    Pool states = states_before, conv = conv_before;
    Status st;
    pr.call(pr.inputs(pk.tokens), pk.cu, slots, states, conv, 64, /*decode=*/true, st);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_TRUE(states.row_equal(states_before, r));
      EXPECT_TRUE(conv.row_equal(conv_before, r));
    }
  }
}

// A call the layer rejects changes nothing, not even the conv states its first step would write.
TEST(LinearAttentionLayerKernelArgs, RejectedCallWritesNothing) {
  LayerProblem pr;
  pr.dt = DType::kF32;
  pr.HV = 3;  // HV % H != 0: only the rule step would notice
  const std::vector<int64_t> cu = {0, 4};
  const std::vector<int32_t> slots = {0};
  std::vector<TokenRef> toks;
  for (int64_t t = 0; t < 4; ++t) toks.push_back({0, t});
  const LayerProblem::Inputs in = pr.inputs(toks);
  const Pool states_before(1, pr.HV * pr.K * pr.V, 50), conv_before(1, pr.D() * (pr.W - 1), 51);
  Pool states = states_before, conv = conv_before;
  const Buffer qkv = Buffer::of(in.qkv, pr.dt), z = Buffer::of(in.z, pr.dt),
               a = Buffer::of(in.a, pr.dt), b = Buffer::of(in.b, pr.dt);
  Buffer out = Buffer::poisoned(4 * pr.HV * pr.V, pr.dt);
  LinearAttentionLayerParams p;
  p.seq_len = 4;
  p.num_heads = pr.H;
  p.num_value_heads = pr.HV;
  p.key_dim = pr.K;
  p.value_dim = pr.V;
  p.qkv = qkv.data();
  p.z = z.data();
  p.a = a.data();
  p.b = b.data();
  p.conv_weight = pr.conv_weight_f.data();
  p.A_log = pr.A_log_f.data();
  p.dt_bias = pr.dt_bias_f.data();
  p.norm_weight = pr.norm_weight_f.data();
  p.out = out.data();
  p.cu_seqlens = cu.data();
  p.num_seqs = 1;
  p.initial_state = p.final_state = states.data.data();
  p.initial_conv_state = p.final_conv_state = conv.data.data();
  p.state_slots = slots.data();
  EXPECT_EQ(linear_attention_layer(p).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(states.row_equal(states_before, 0));
  EXPECT_TRUE(conv.row_equal(conv_before, 0));
  EXPECT_TRUE(all_nan(out, 0, out.size()));
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
