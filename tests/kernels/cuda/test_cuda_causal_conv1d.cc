// The CUDA causal conv1d kernels (packed prefill on a state pool with padding, in-place update)
// against the FP64 reference (cuda_kernels_testbed.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/causal_conv1d.h"
#include "reference/causal_conv1d.h"
#include "tests/kernels/cuda/cuda_kernels_testbed.h"

namespace deltacheck::kernels::cuda {
namespace {

using namespace testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---- causal conv1d ---------------------------------------------------------------------------

struct ConvCase {
  std::vector<int64_t> lens;
  int64_t channels = 48, width = 4;
  DType dtype = DType::kF32;
  bool bias = true, silu = true;
  std::vector<int32_t> slots;
  std::vector<uint8_t> has_initial_state;  // empty: all
  int64_t pool_rows = 0;
  uint64_t seed = 1;
};

void check_conv_case(const ConvCase& c) {
  SplitMix64 rng(c.seed);
  const auto N = static_cast<int64_t>(c.lens.size());
  std::vector<int64_t> cu = {0};
  for (int64_t n : c.lens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), D = c.channels, taps = c.width - 1;
  const int64_t rows = c.slots.empty() ? N : c.pool_rows;
  auto slot = [&](int64_t i) {
    return c.slots.empty() ? static_cast<int32_t>(i) : c.slots[static_cast<size_t>(i)];
  };
  const std::vector<float> x =
      rounded(rng.uniform_vector(static_cast<size_t>(T * D), -2.0, 2.0), c.dtype);
  const std::vector<float> weight = rng.uniform_vector(static_cast<size_t>(D * c.width), -0.7, 0.7);
  const std::vector<float> bias = rng.uniform_vector(static_cast<size_t>(D), -0.3, 0.3);
  const std::vector<float> pool =
      rng.uniform_vector(static_cast<size_t>(rows * D * taps), -2.0, 2.0);

  std::vector<double> initial(static_cast<size_t>(N * D * taps), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    if (slot(i) >= 0)
      std::copy_n(pool.begin() + slot(i) * D * taps, D * taps, initial.begin() + i * D * taps);
  }
  const std::vector<double> xd = widen(x), wd = widen(weight), bd = widen(bias);
  reference::CausalConv1dArgs a;
  a.seq_len = T;
  a.channels = D;
  a.width = c.width;
  a.x = xd.data();
  a.weight = wd.data();
  a.bias = c.bias ? bd.data() : nullptr;
  a.silu = c.silu;
  a.cu_seqlens = cu;
  a.initial_state = initial.data();
  for (uint8_t h : c.has_initial_state) a.has_initial_state.push_back(h != 0);
  const reference::CausalConv1dResult ref = reference::causal_conv1d(a);

  DeviceBuffer dx(encode(x, c.dtype)), dw(weight), db(bias), dcu(cu), dslots(c.slots), dpool(pool),
      dhas(c.has_initial_state);
  DeviceBuffer dout(static_cast<size_t>(T * D) * static_cast<size_t>(dtype_size(c.dtype)));
  dout.fill(kPoison);
  CausalConv1dParams p;
  p.seq_len = T;
  p.channels = D;
  p.width = c.width;
  p.dtype = c.dtype;
  p.x = dx.as<void>();
  p.out = dout.as<void>();
  p.weight = dw.as<float>();
  p.bias = c.bias ? db.as<float>() : nullptr;
  p.silu = c.silu;
  p.cu_seqlens = dcu.as<int64_t>();
  p.num_seqs = N;
  p.initial_state = dpool.as<float>();
  p.final_state = dpool.as<float>();
  p.state_slots = c.slots.empty() ? nullptr : dslots.as<int32_t>();
  p.num_state_rows = rows;
  p.has_initial_state = c.has_initial_state.empty() ? nullptr : dhas.as<uint8_t>();
  DC_EXPECT_OK(causal_conv1d(p, nullptr));
  const std::vector<uint8_t> out_bytes = dout.download<uint8_t>();
  const std::vector<float> out = decode(out_bytes, c.dtype);
  const std::vector<float> pool_out = dpool.download<float>();

  Error e;
  std::vector<bool> written(static_cast<size_t>(rows), false);
  const auto esize = static_cast<size_t>(dtype_size(c.dtype));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t b = cu[static_cast<size_t>(i)], end = cu[static_cast<size_t>(i + 1)];
    if (slot(i) < 0) {
      EXPECT_TRUE(all_bytes(out_bytes, static_cast<size_t>(b * D) * esize,
                            static_cast<size_t>(end * D) * esize, kPoison))
          << "output of padding entry " << i << " was written";
      continue;
    }
    for (int64_t t = b * D; t < end * D; ++t)
      e.add(ref.output[static_cast<size_t>(t)], out[static_cast<size_t>(t)]);
    written[static_cast<size_t>(slot(i))] = true;
    // The final state holds inputs: exact.
    for (int64_t s = 0; s < D * taps; ++s) {
      ASSERT_EQ(static_cast<float>(ref.final_state[static_cast<size_t>(i * D * taps + s)]),
                pool_out[static_cast<size_t>(slot(i) * D * taps + s)])
          << "final conv state of sequence " << i << ", element " << s;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (written[static_cast<size_t>(r)]) continue;
    EXPECT_EQ(0, std::memcmp(pool_out.data() + r * D * taps, pool.data() + r * D * taps,
                             static_cast<size_t>(D * taps) * sizeof(float)))
        << "conv pool row " << r << " is addressed by no sequence but changed";
  }
  ASSERT_GT(e.ref_norm(), 0.0);
  EXPECT_EQ(e.non_finite, 0) << describe("out", e);
  EXPECT_LE(e.rel_rms(), c.dtype == DType::kF32 ? 1e-6 : output_ceiling(c.dtype))
      << describe("out", e);
}

TEST(CudaCausalConv1d, PackedWithStatesPoolAndPadding) {
  DC_REQUIRE_DEVICE();
  ConvCase c;
  c.lens = {0, 1, 2, 3, 7, 0, 20, 5};
  c.slots = {1, 5, 0, -1, 2, 3, 7, -1};
  c.has_initial_state = {1, 1, 0, 1, 1, 1, 0, 1};
  c.pool_rows = 9;
  c.seed = 31;
  check_conv_case(c);
}

TEST(CudaCausalConv1d, BFloat16WidthTwoNoBiasNoSilu) {
  DC_REQUIRE_DEVICE();
  ConvCase c;
  c.lens = {1, 40, 0, 3};
  c.width = 2;
  c.dtype = DType::kBF16;
  c.bias = false;
  c.silu = false;
  c.seed = 32;
  check_conv_case(c);
}

TEST(CudaCausalConv1d, UpdateInPlaceOnPool) {
  DC_REQUIRE_DEVICE();
  SplitMix64 rng(33);
  const int64_t N = 4, D = 40, W = 4, taps = W - 1, rows = 5;
  const std::vector<int32_t> slots = {2, -1, 0, 3};
  const std::vector<float> weight = rng.uniform_vector(static_cast<size_t>(D * W), -0.7, 0.7);
  const std::vector<float> bias = rng.uniform_vector(static_cast<size_t>(D), -0.3, 0.3);
  std::vector<float> pool = rng.uniform_vector(static_cast<size_t>(rows * D * taps), -2.0, 2.0);
  const std::vector<float> pool_before = pool;
  DeviceBuffer dw(weight), db(bias), dslots(slots), dpool(pool);
  const std::vector<double> wd = widen(weight), bd = widen(bias);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = rng.uniform_vector(static_cast<size_t>(N * D), -2.0, 2.0);
    DeviceBuffer dx(x), dout(static_cast<size_t>(N * D) * sizeof(float));
    dout.fill(kPoison);
    CausalConv1dUpdateParams p;
    p.num_seqs = N;
    p.channels = D;
    p.width = W;
    p.x = dx.as<void>();
    p.out = dout.as<void>();
    p.weight = dw.as<float>();
    p.bias = db.as<float>();
    p.state = dpool.as<float>();
    p.state_slots = dslots.as<int32_t>();
    p.num_state_rows = rows;
    DC_EXPECT_OK(causal_conv1d_update(p, nullptr));
    const std::vector<float> out = dout.download<float>();
    const std::vector<float> pool_out = dpool.download<float>();

    std::vector<double> state(static_cast<size_t>(N * D * taps), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      if (slots[static_cast<size_t>(i)] >= 0) {
        std::copy_n(pool.begin() + slots[static_cast<size_t>(i)] * D * taps, D * taps,
                    state.begin() + i * D * taps);
      }
    }
    const std::vector<double> xd = widen(x);
    reference::CausalConv1dUpdateArgs a;
    a.num_seqs = N;
    a.channels = D;
    a.width = W;
    a.x = xd.data();
    a.state = state.data();
    a.weight = wd.data();
    a.bias = bd.data();
    const reference::CausalConv1dResult ref = reference::causal_conv1d_update(a);
    Error e;
    for (int64_t i = 0; i < N; ++i) {
      const int32_t s = slots[static_cast<size_t>(i)];
      const auto* out_bytes = reinterpret_cast<const uint8_t*>(out.data() + i * D);
      if (s < 0) {
        EXPECT_TRUE(
            std::all_of(out_bytes, out_bytes + D * 4, [](uint8_t b) { return b == kPoison; }));
        continue;
      }
      for (int64_t d = 0; d < D; ++d)
        e.add(ref.output[static_cast<size_t>(i * D + d)], out[static_cast<size_t>(i * D + d)]);
      for (int64_t j = 0; j < D * taps; ++j) {
        ASSERT_EQ(static_cast<float>(ref.final_state[static_cast<size_t>(i * D * taps + j)]),
                  pool_out[static_cast<size_t>(s * D * taps + j)])
            << "step " << step << ", sequence " << i;
      }
    }
    ASSERT_GT(e.ref_norm(), 0.0);
    EXPECT_EQ(e.non_finite, 0);
    EXPECT_LE(e.rel_rms(), 1e-6) << "step " << step << ": " << describe("out", e);
    pool = pool_out;
  }
  for (int64_t r : {1, 4}) {
    EXPECT_EQ(0, std::memcmp(pool.data() + r * D * taps, pool_before.data() + r * D * taps,
                             static_cast<size_t>(D * taps) * sizeof(float)))
        << "conv pool row " << r;
  }
}

}  // namespace
}  // namespace deltacheck::kernels::cuda
