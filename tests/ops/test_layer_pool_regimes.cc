// A layer regime scales the pools' conv rows as it scales the initial conv state (issue 36): each
// column of a row is a past token's conv input, so under tinyqk / hugeqk its q/k channels have the
// regime's norms too, and the v channels keep N(0, 1); regime=rand keeps the pool bit for bit
// (generate_serving's values), so the serving cases without a regime keep their fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/generate.h"
#include "ops/regimes.h"

namespace deltacheck::ops {
namespace {

using cases::Case;

// The norms of every q/k head's channels in every column of every row of the conv pool, and the
// rms of the v channels.
struct PoolNorms {
  std::vector<double> qk;
  double v_rms = 0;
};

PoolNorms pool_norms(const std::string& id, int64_t H, int64_t K) {
  const Case c = Case::parse(id);
  const cases::TensorMap in = cases::generate_inputs(c);
  const cases::Tensor& pool = in.at("conv_state_pool");
  const int64_t rows = pool.shape()[0], D = pool.shape()[1], cols = pool.shape()[2];
  PoolNorms n;
  double vv = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t head = 0; head < 2 * H; ++head) {
        double ss = 0;
        for (int64_t i = 0; i < K; ++i) {
          const double x = pool.get((r * D + head * K + i) * cols + j);
          ss += x * x;
        }
        n.qk.push_back(std::sqrt(ss));
      }
      for (int64_t ch = 2 * H * K; ch < D; ++ch, ++count) {
        const double x = pool.get((r * D + ch) * cols + j);
        vv += x * x;
      }
    }
  std::sort(n.qk.begin(), n.qk.end());
  n.v_rms = std::sqrt(vv / static_cast<double>(count));
  return n;
}

TEST(LayerPoolRegimes, TheConvPoolsRowsAreInTheRegime) {
  for (const char* cache : {"pool", "accept", "ckpt", "spec"})
    for (const char* regime : {"tinyqk", "hugeqk"}) {
      const std::string layout = std::string(cache) == "accept" || std::string(cache) == "spec"
                                     ? "packed[4*3]"
                                     : "packed[5,70,1]";
      const std::string id = "layer(layout=" + layout +
                             ",H=2,HV=4,K=32,V=8,dtype=bf16,regime=" + regime + ",cache=" + cache +
                             ",seed=9)";
      const PoolNorms n = pool_norms(id, 2, 32);
      const bool tiny = std::string(regime) == "tinyqk";
      const double lo = tiny ? kTinyNormMin : kHugeNormMin, hi = tiny ? kTinyNormMax : kHugeNormMax;
      // Placed at norm n * gain (gain 2 or sqrt 2), n log-uniform in [lo, hi]; bf16 rounding.
      EXPECT_GT(n.qk.front(), lo) << id;
      EXPECT_LT(n.qk.back(), 2.1 * hi) << id;
      EXPECT_GT(n.v_rms, 0.8) << id;  // the v channels: untouched N(0, 1)
      EXPECT_LT(n.v_rms, 1.2) << id;
    }
}

TEST(LayerPoolRegimes, RandKeepsThePoolAndCorrkCorrelatesItsKeys) {
  const std::string id = "layer(layout=packed[5,70,1],H=2,HV=4,K=32,V=8,cache=pool,seed=9)";
  const cases::TensorMap rand = cases::generate_inputs(Case::parse(id));
  const PoolNorms n = pool_norms(id, 2, 32);
  // N(0, 1) channels: a head's norm about sqrt(K) = 5.7.
  EXPECT_GT(n.qk[n.qk.size() / 2], 4.0);
  EXPECT_LT(n.qk[n.qk.size() / 2], 7.5);
  // corrk: the same pool with the k heads' columns correlated; q heads and v channels unchanged.
  const std::string corr =
      "layer(layout=packed[5,70,1],H=2,HV=4,K=32,V=8,regime=corrk,"
      "cache=pool,seed=9)";
  const cases::TensorMap c = cases::generate_inputs(Case::parse(corr));
  const cases::Tensor &a = rand.at("conv_state_pool"), &b = c.at("conv_state_pool");
  ASSERT_EQ(a.shape(), b.shape());
  const int64_t D = a.shape()[1], cols = a.shape()[2], K = 32, H = 2;
  int64_t k_moved = 0, q_moved = 0;
  for (int64_t r = 0; r < a.shape()[0]; ++r)
    for (int64_t ch = 0; ch < D; ++ch)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t e = (r * D + ch) * cols + j;
        const bool moved = a.get(e) != b.get(e);
        if (ch < H * K)
          q_moved += moved;
        else if (ch < 2 * H * K)
          k_moved += moved;
        else
          EXPECT_FALSE(moved) << "v channel " << ch;
      }
  EXPECT_EQ(q_moved, 0);
  EXPECT_GT(k_moved, a.shape()[0] * H * K * cols / 2);
}

}  // namespace
}  // namespace deltacheck::ops
