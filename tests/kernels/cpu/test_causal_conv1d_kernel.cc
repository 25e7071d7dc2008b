// The CPU causal conv1d kernel against the FP64 reference: packed prefill in place on a conv-state
// pool, batched rows, decode steps against the prefill of their concatenation, and the arguments
// it refuses (layer_kernels_testbed.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/causal_conv1d.h"
#include "reference/causal_conv1d.h"
#include "tests/kernels/cpu/layer_kernels_testbed.h"

namespace deltacheck::kernels::cpu {
namespace {

namespace ref = deltacheck::reference;
using namespace layer_testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---------------------------------------------------------------------------------------------
// causal conv1d

struct ConvCase {
  DType dtype;
  int64_t width;
};

// One conv setup (weights, bias, a conv-state pool with slots) shared by the kernel and the
// reference runs of a test.
struct PooledConv {
  DType dt;
  int64_t D, W;
  std::vector<int32_t> slots;
  std::vector<double> weight = weights(1, D*W, -1.0, 1.0), bias = weights(2, D, -0.5, 0.5);
  std::vector<float> weight_f = to_float(weight), bias_f = to_float(bias);
  Pool before{static_cast<int64_t>(slots.size()) + 2, D*(W - 1), 3};  // two rows nobody uses
  Pool pool = before;

  int64_t state_size() const { return D * (W - 1); }

  // The reference over packed x from the pool's rows as they were before any kernel ran.
  ref::CausalConv1dResult reference(const std::vector<double>& x, const std::vector<int64_t>& cu,
                                    const std::vector<uint8_t>& has) const {
    const std::vector<double> init = before.gather(slots);
    ref::CausalConv1dArgs a;
    a.seq_len = cu.back();
    a.channels = D;
    a.width = W;
    a.x = x.data();
    a.weight = weight.data();
    a.bias = bias.data();
    a.cu_seqlens = cu;
    a.initial_state = init.data();
    a.has_initial_state.assign(has.begin(), has.end());
    return ref::causal_conv1d(a);
  }

  // The kernel's packed prefill, in place on the pool.
  Status prefill(const Buffer& x, Buffer& out, const std::vector<int64_t>& cu,
                 const std::vector<uint8_t>& has) {
    CausalConv1dParams p;
    p.seq_len = cu.back();
    p.channels = D;
    p.width = W;
    p.dtype = dt;
    p.x = x.data();
    p.out = out.data();
    p.weight = weight_f.data();
    p.bias = bias_f.data();
    p.cu_seqlens = cu.data();
    p.num_seqs = static_cast<int64_t>(cu.size()) - 1;
    p.initial_state = p.final_state = pool.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = pool.rows;
    p.has_initial_state = has.empty() ? nullptr : has.data();
    p.num_threads = 2;
    return causal_conv1d(p);
  }

  // The kernel's decode step, in place on the pool.
  Status update(const Buffer& x, Buffer& out) {
    CausalConv1dUpdateParams u;
    u.num_seqs = static_cast<int64_t>(slots.size());
    u.channels = D;
    u.width = W;
    u.dtype = dt;
    u.x = x.data();
    u.out = out.data();
    u.weight = weight_f.data();
    u.bias = bias_f.data();
    u.state = pool.data.data();
    u.state_slots = slots.data();
    u.num_state_rows = pool.rows;
    u.num_threads = 2;
    return causal_conv1d_update(u);
  }

  // Each addressed pool row holds the reference's final state (exactly: states are copies of
  // inputs); rows nobody addresses are untouched.
  void expect_final_states(const ref::CausalConv1dResult& want) const {
    const int64_t S = state_size();
    for (size_t n = 0; n < slots.size(); ++n) {
      if (slots[n] < 0) continue;
      EXPECT_TRUE(close("conv state", read(pool.data, slots[n] * S, (slots[n] + 1) * S),
                        slice(want.final_state, n * S, (n + 1) * S), 0.0, 0.0))
          << "sequence " << n;
    }
    expect_untouched_rows(before, pool, slots);
  }
};

class CausalConv1dKernel : public ::testing::TestWithParam<ConvCase> {};

// Packed prefill, in place on a conv-state pool: zero-length sequences at the start, middle and
// end, lengths across the 32-token tiles, D across the 256-channel tiles, per-sequence
// has_initial_state flags, one padding entry.
TEST_P(CausalConv1dKernel, PackedPrefillMatchesReference) {
  PooledConv c{GetParam().dtype, 300, GetParam().width, {3, 0, 9, 5, 6, -1, 1, 7}};
  const std::vector<int64_t> lens = {0, 1, 2, 70, 0, 33, 5, 0};
  const std::vector<uint8_t> has = {1, 0, 1, 1, 1, 1, 0, 1};
  const Packing pk = pack(std::vector<int64_t>(lens.size(), 0), lens);
  const int64_t D = c.D, T = pk.cu.back();
  const std::vector<double> x = gather(TokenSource(100 + c.W), kQkv, pk.tokens, D, -2.0, 2.0, c.dt);
  const ref::CausalConv1dResult want = c.reference(x, pk.cu, has);
  ASSERT_GT(max_abs(want.output), 0.1);

  Buffer out = Buffer::poisoned(T * D, c.dt);
  ASSERT_TRUE(c.prefill(Buffer::of(x, c.dt), out, pk.cu, has).ok());
  for (size_t n = 0; n < lens.size(); ++n) {
    const int64_t b = pk.cu[n] * D, e = pk.cu[n + 1] * D;
    if (c.slots[n] < 0) {
      EXPECT_TRUE(all_nan(out, b, e)) << "padding entry " << n << " wrote output";
      continue;
    }
    EXPECT_TRUE(close("output", read(out, b, e), slice(want.output, b, e), 1e-5, roundoff(c.dt)))
        << "sequence " << n;
  }
  c.expect_final_states(want);
}

// The batched [B, T, D] layout, no states in, final states to a separate buffer, no slots.
TEST_P(CausalConv1dKernel, BatchedMatchesReference) {
  const DType dt = GetParam().dtype;
  const int64_t W = GetParam().width, D = 40, B = 3, T = 37, S = W - 1;
  const TokenSource src(200 + W);
  std::vector<TokenRef> toks;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) toks.push_back({b, t});
  const std::vector<double> x = gather(src, kQkv, toks, D, -2.0, 2.0, dt);
  const std::vector<double> w = weights(4, D * W, -1.0, 1.0);
  const std::vector<float> wf = to_float(w);
  ref::CausalConv1dArgs ra;
  ra.batch = B;
  ra.seq_len = T;
  ra.channels = D;
  ra.width = W;
  ra.x = x.data();
  ra.weight = w.data();
  ra.silu = false;
  const ref::CausalConv1dResult want = ref::causal_conv1d(ra);

  const Buffer xb = Buffer::of(x, dt);
  Buffer out = Buffer::poisoned(B * T * D, dt);
  std::vector<float> final_state(static_cast<size_t>(B * D * S), std::nanf(""));
  CausalConv1dParams p;
  p.batch = B;
  p.seq_len = T;
  p.channels = D;
  p.width = W;
  p.dtype = dt;
  p.x = xb.data();
  p.out = out.data();
  p.weight = wf.data();
  p.silu = false;
  p.final_state = final_state.data();
  ASSERT_TRUE(causal_conv1d(p).ok());
  EXPECT_TRUE(close("output", read(out, 0, B * T * D), want.output, 1e-5, roundoff(dt)));
  EXPECT_TRUE(close("conv state", read(final_state, 0, B * D * S), want.final_state, 0.0, 0.0));
}

// Prefill of a prefix, then decode steps through causal_conv1d_update in place on the pool ==
// one reference prefill of the concatenation.
TEST_P(CausalConv1dKernel, DecodeStepsEqualPrefillOfConcatenation) {
  PooledConv c{GetParam().dtype, 270, GetParam().width, {2, -1, 0, 4}};
  const std::vector<int64_t> prefix = {0, 1, 6, 3};
  const int64_t N = static_cast<int64_t>(prefix.size()), D = c.D, steps = 4;
  const TokenSource src(300 + c.W);
  std::vector<int64_t> full(N);
  for (int64_t n = 0; n < N; ++n) full[n] = prefix[n] + steps;
  const Packing all = pack(std::vector<int64_t>(N, 0), full);
  const ref::CausalConv1dResult want =
      c.reference(gather(src, kQkv, all.tokens, D, -2.0, 2.0, c.dt), all.cu, {});

  const Packing pre = pack(std::vector<int64_t>(N, 0), prefix);
  Buffer out_pre = Buffer::poisoned(pre.cu.back() * D, c.dt);
  ASSERT_TRUE(c.prefill(Buffer::of(gather(src, kQkv, pre.tokens, D, -2.0, 2.0, c.dt), c.dt),
                        out_pre, pre.cu, {})
                  .ok());
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<TokenRef> step;
    for (int64_t n = 0; n < N; ++n) step.push_back({n, prefix[n] + s});
    Buffer out = Buffer::poisoned(N * D, c.dt);
    ASSERT_TRUE(c.update(Buffer::of(gather(src, kQkv, step, D, -2.0, 2.0, c.dt), c.dt), out).ok());
    for (int64_t n = 0; n < N; ++n) {
      if (c.slots[n] < 0) {
        EXPECT_TRUE(all_nan(out, n * D, (n + 1) * D)) << "padding entry wrote output";
        continue;
      }
      const int64_t at = (all.cu[n] + prefix[n] + s) * D;
      EXPECT_TRUE(close("decode output", read(out, n * D, (n + 1) * D),
                        slice(want.output, at, at + D), 1e-5, roundoff(c.dt)))
          << "sequence " << n << " step " << s;
    }
  }
  c.expect_final_states(want);
}

INSTANTIATE_TEST_SUITE_P(TypesAndWidths, CausalConv1dKernel,
                         ::testing::Values(ConvCase{DType::kF32, 2}, ConvCase{DType::kF32, 3},
                                           ConvCase{DType::kF32, 4}, ConvCase{DType::kBF16, 4},
                                           ConvCase{DType::kF16, 3}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return std::string(dtype_name(i.param.dtype)) + "_W" +
                                  std::to_string(i.param.width);
                         });

TEST(CausalConv1dKernelArgs, RejectsWhatItCannotRun) {
  const float x[8] = {}, w[8] = {};
  float out[8] = {}, state[8] = {};
  CausalConv1dParams p;
  p.seq_len = 2;
  p.channels = 1;
  p.width = 5;
  p.x = x;
  p.out = out;
  p.weight = w;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kUnsupported);
  p.width = 4;
  const int64_t cu[3] = {0, 1, 2};
  const int32_t slots[2] = {1, 1};  // two sequences writing one row would race
  p.cu_seqlens = cu;
  p.num_seqs = 2;
  p.final_state = state;
  p.state_slots = slots;
  p.num_state_rows = 2;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kInvalidArgument);
  const int32_t out_of_range[2] = {0, 2};
  p.state_slots = out_of_range;
  EXPECT_EQ(causal_conv1d(p).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
