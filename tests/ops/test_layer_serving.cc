// The layer's serving state (ops/layer/serving.h, docs/serving.md): the tables of cache=pool and
// cache=accept, the has-initial-state contract in the FP64 expectation (a new request's results
// do not depend on what its recycled row holds; a continuing request's do) and the rolled conv
// row of a speculative verify (its window at any next count is the conv state of that accepted
// prefix, computed here by the FP64 conv on its own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/generate.h"
#include "ops/layer/params.h"
#include "ops/layer/serving.h"
#include "reference/causal_conv1d.h"

namespace deltacheck::ops::layer {
namespace {

using cases::Case;

TEST(LayerServing, NewModesAreNewValuesOfCacheAndTheirRulesAreChecked) {
  // An id of before keeps its spelling (cache's default and every other parameter unchanged).
  EXPECT_EQ(Case::parse("layer(layout=packed[9,30],seed=3)").id(),
            "layer(layout=packed[9,30],H=2,HV=4,K=32,V=32,W=4,bias=1,dtype=fp32,state=rand,"
            "cache=prefill,calls=3,seed=3)");
  EXPECT_TRUE(Case::from_id("layer(layout=packed[1,5],cache=pool,state=none)").ok());
  const auto unequal = Case::from_id("layer(layout=packed[3,4],cache=accept)");
  ASSERT_FALSE(unequal.ok());
  EXPECT_NE(unequal.status().message().find("equal length"), std::string::npos);
  EXPECT_FALSE(Case::from_id("layer(layout=packed[3*4],cache=accept,state=none)").ok());
}

TEST(LayerServing, PoolTablesHavePaddingLastAndNewRequestsOnDirtyRows) {
  const Case c = Case::parse("layer(layout=packed[1*8],cache=pool,state=mixed,calls=2,seed=11)");
  const Params p = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  const int32_t* has = in.at("has_initial_state").as<int32_t>();
  std::set<int32_t> rows;
  for (int64_t s = 0; s < 8; ++s) {
    EXPECT_EQ(slots[s] < 0, s >= 6) << s;
    if (slots[s] >= 0) {
      EXPECT_TRUE(rows.insert(slots[s]).second) << "slot used twice";
    }
    EXPECT_EQ(has[s], s % 2) << s;
  }
  // Every row holds garbage before the call, the new requests' rows included.
  const cases::Tensor& pool = in.at("state_pool");
  const int64_t per = p.HV * p.K * p.V;
  for (int64_t s = 0; s < 6; s += 2) {
    double sum = 0;
    for (int64_t j = 0; j < per; ++j) sum += std::abs(pool.get(slots[s] * per + j));
    EXPECT_GT(sum, 0.1 * per) << "new request " << s << "'s row is not dirty";
  }
}

// Overwrites rows `of` of both pools with other garbage.
void redirty(const Params& p, cases::TensorMap& in, const std::vector<int64_t>& sequences) {
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  cases::Tensor &pool = in.at("state_pool"), &conv = in.at("conv_state_pool");
  const int64_t per = p.HV * p.K * p.V, per_conv = p.D * (p.W - 1);
  for (int64_t s : sequences) {
    for (int64_t j = 0; j < per; ++j) pool.set(slots[s] * per + j, 3.0 - 0.01 * j);
    for (int64_t j = 0; j < per_conv; ++j) conv.set(slots[s] * per_conv + j, -2.0 + 0.02 * j);
  }
}

bool same_rows(const std::vector<double>& a, const std::vector<double>& b, int64_t begin,
               int64_t end) {
  return std::equal(a.begin() + begin, a.begin() + end, b.begin() + begin);
}

TEST(LayerServing, ANewRequestIgnoresWhatItsRecycledRowHoldsAndAContinuingOneReadsIt) {
  const Case c =
      Case::parse("layer(layout=packed[1,5,1,9,1],cache=pool,state=mixed,calls=1,seed=4)");
  const Params p = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const Values base = operation().oracle(c, in);
  const auto cu = p.layout.cu_seqlens();
  const int64_t row = p.HV * p.V;
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  const int64_t per = p.HV * p.K * p.V;
  // Sequences 0 and 2 are new (has_initial_state 0), 1 and 3 continue, 4 is padding.
  cases::TensorMap fresh = in;
  redirty(p, fresh, {0, 2});
  const Values f = operation().oracle(c, fresh);
  for (int64_t s : {0, 1, 2, 3}) {
    EXPECT_TRUE(same_rows(base.at("o"), f.at("o"), cu[s] * row, cu[s + 1] * row)) << s;
    EXPECT_TRUE(
        same_rows(base.at("state_pool"), f.at("state_pool"), slots[s] * per, (slots[s] + 1) * per))
        << s;
  }
  cases::TensorMap continuing = in;
  redirty(p, continuing, {1});
  const Values g = operation().oracle(c, continuing);
  EXPECT_FALSE(same_rows(base.at("o"), g.at("o"), cu[1] * row, cu[2] * row));
  EXPECT_TRUE(same_rows(base.at("o"), g.at("o"), cu[3] * row, cu[4] * row));
}

TEST(LayerServing, AcceptTablesHoldEveryCountAndRowsOfTheirOwn) {
  const Case c = Case::parse("layer(layout=packed[5*6],cache=accept,seed=9)");
  const cases::TensorMap in = cases::generate_inputs(c);
  std::set<int32_t> counts(in.at("num_accepted_tokens").as<int32_t>(),
                           in.at("num_accepted_tokens").as<int32_t>() + 6);
  EXPECT_EQ(counts, (std::set<int32_t>{1, 2, 3, 4, 5}));
  const cases::Tensor& idx = in.at("state_indices");
  std::set<int32_t> rows(idx.as<int32_t>(), idx.as<int32_t>() + idx.numel());
  EXPECT_EQ(rows.size(), 30u);
  EXPECT_EQ(in.at("conv_state_pool").shape()[2], 4 - 2 + 5);  // W - 2 + T columns
}

// After a verify, the next verify's window at count a' (columns a' - 1 ..) must be the conv state
// after the first a' tokens of this call: the FP64 conv run on (window, those tokens) says what.
TEST(LayerServing, TheRolledConvRowHoldsTheWindowOfEveryNextAcceptedCount) {
  const Case c = Case::parse("layer(layout=packed[6*7],cache=accept,seed=21)");
  const Params p = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const Values v = operation().oracle(c, in);
  const int64_t T = 6, W = p.W, D = p.D, cols = conv_state_columns(p);
  const int32_t* idx = in.at("state_indices").as<int32_t>();
  const int32_t* acc = in.at("num_accepted_tokens").as<int32_t>();
  const std::vector<double> conv_in = in.at("conv_state_pool").to_double(),
                            qkv = in.at("qkv").to_double(),
                            weight = in.at("conv_weight").to_double();
  for (int64_t s = 0; s < p.N; ++s) {
    const int64_t r = idx[s * T], a = acc[s];
    std::vector<double> window(static_cast<size_t>(D * (W - 1)));
    for (int64_t ch = 0; ch < D; ++ch)
      for (int64_t j = 0; j < W - 1; ++j)
        window[ch * (W - 1) + j] = conv_in[r * D * cols + ch * cols + a - 1 + j];
    for (int64_t next = 1; next <= T; ++next) {
      reference::CausalConv1dArgs ca;
      ca.seq_len = next;
      ca.channels = D;
      ca.width = W;
      ca.x = qkv.data() + s * T * D;
      ca.weight = weight.data();
      ca.initial_state = window.data();
      const auto ref = reference::causal_conv1d(ca);
      for (int64_t ch = 0; ch < D; ++ch)
        for (int64_t j = 0; j < W - 1; ++j)
          ASSERT_EQ(v.at("conv_state_pool")[r * D * cols + ch * cols + next - 1 + j],
                    ref.final_state[ch * (W - 1) + j])
              << "seq " << s << ", next count " << next << ", channel " << ch;
    }
  }
}

// Every block's conv row holds the last W-1 inputs up to the block's end (or the sequence's end),
// reaching back into earlier blocks and the initial conv state where blocks are shorter than W-1:
// the FP64 conv of that prefix, run on its own, says what they are.
TEST(LayerServing, CheckpointRowsHoldTheConvStateAtEveryBlockEnd) {
  const Case c = Case::parse("layer(layout=packed[7,0,2,5],cache=ckpt,calls=2,seed=31)");
  const Params p = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const Values v = operation().oracle(c, in);
  const int64_t W = p.W, D = p.D, per = D * (W - 1);
  const cases::Tensor& table = in.at("block_slots");
  const std::vector<double> qkv = in.at("qkv").to_double(),
                            weight = in.at("conv_weight").to_double(),
                            c0 = in.at("initial_conv_state").to_double();
  const auto cu = p.layout.cu_seqlens();
  int checked = 0;
  for (int64_t s = 0; s < p.N; ++s)
    for (int64_t b = 0; b * 2 < p.layout.lengths[s]; ++b) {
      reference::CausalConv1dArgs ca;
      ca.seq_len = std::min<int64_t>((b + 1) * 2, p.layout.lengths[s]);
      ca.channels = D;
      ca.width = W;
      ca.x = qkv.data() + cu[s] * D;
      ca.weight = weight.data();
      ca.initial_state = c0.data() + s * per;
      const auto ref = reference::causal_conv1d(ca);
      const int64_t row = table.as<int32_t>()[s * table.shape()[1] + b];
      for (int64_t j = 0; j < per; ++j)
        ASSERT_EQ(v.at("conv_state_pool")[row * per + j], ref.final_state[j])
            << "seq " << s << ", block " << b << ", element " << j;
      ++checked;
    }
  EXPECT_EQ(checked, 4 + 1 + 3);
}

// A multi-token decode keeps the conv state after every token: the W-1 inputs ending at it,
// reaching into the row the sequence started from (the FP64 conv of that prefix says what).
TEST(LayerServing, SpecKeepsTheConvStateAfterEveryToken) {
  const Case c = Case::parse("layer(layout=packed[4*5],cache=spec,seed=41)");
  const Params p = decode(c);
  const cases::TensorMap in = cases::generate_inputs(c);
  const Values v = operation().oracle(c, in);
  const int64_t T = 4, W = p.W, D = p.D, per = D * (W - 1);
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  const std::vector<double> qkv = in.at("qkv").to_double(),
                            weight = in.at("conv_weight").to_double(),
                            pool = in.at("conv_state_pool").to_double();
  for (int64_t s = 0; s < p.N; ++s)
    for (int64_t t = 0; t < T; ++t) {
      reference::CausalConv1dArgs ca;
      ca.seq_len = t + 1;
      ca.channels = D;
      ca.width = W;
      ca.x = qkv.data() + s * T * D;
      ca.weight = weight.data();
      ca.initial_state = pool.data() + slots[s] * per;
      const auto ref = reference::causal_conv1d(ca);
      for (int64_t j = 0; j < per; ++j)
        ASSERT_EQ(v.at("token_conv_states")[(s * T + t) * per + j], ref.final_state[j])
            << "seq " << s << ", token " << t << ", element " << j;
    }
}

}  // namespace
}  // namespace deltacheck::ops::layer
