// The CPU kernels' serving contracts (docs/serving.md) on raw buffers: block checkpoints written
// by the chunked prefill (against the FP64 reference on each prefix), and the recurrent decode
// resuming from the accepted token's row (against the same kernel given that row as its slot), and
// tree-shaped drafts (against the same kernel run along each token's root path).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/recurrent_decode.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t H = 2, HV = 4, K = 32, V = 24, KV = K * V;

std::vector<float> filled(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<float> x(n);
  uint64_t s = seed;
  for (auto& e : x) {  // splitmix64 -> [lo, hi)
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    e = static_cast<float>(lo + (hi - lo) * static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-53);
  }
  return x;
}

struct Tokens {
  int64_t T;
  std::vector<float> q, k, v, g, beta;
  explicit Tokens(int64_t t)
      : T(t),
        q(filled(T * H * K, 1, -1, 1)),
        k(filled(T * H * K, 2, -1, 1)),
        v(filled(T * HV * V, 3, -1, 1)),
        g(filled(T * HV, 4, -2, -0.01)),
        beta(filled(T * HV, 5, 0.05, 0.95)) {}
};

double rel(const float* a, const std::vector<double>& b, size_t begin, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = a[i] - b[begin + i];
    num += d * d;
    den += b[begin + i] * b[begin + i];
  }
  return std::sqrt(num / den);
}

// FP64 state after the first `len` tokens of the sequence starting at token `begin`, from s0.
std::vector<double> reference_state(const Tokens& x, int64_t begin, int64_t len, const float* s0) {
  std::vector<double> dq(x.q.begin(), x.q.end()), dk(x.k.begin(), x.k.end()),
      dv(x.v.begin(), x.v.end()), dg(x.g.begin(), x.g.end()), db(x.beta.begin(), x.beta.end());
  std::vector<double> ds(3 * KV * HV, 0.0);
  for (int64_t i = 0; i < HV * KV; ++i) ds[HV * KV + i] = s0[i];
  reference::GatedDeltaRuleArgs a;
  a.seq_len = x.T, a.num_heads = H, a.num_value_heads = HV, a.key_dim = K, a.value_dim = V;
  a.q = dq.data(), a.k = dk.data(), a.v = dv.data(), a.g = dg.data(), a.beta = db.data();
  a.cu_seqlens = {0, begin, begin + len, x.T};
  a.initial_state = ds.data();
  a.use_qk_l2norm = true;
  const auto r = reference::gated_delta_rule(a);
  return {r.final_state.begin() + HV * KV, r.final_state.begin() + 2 * HV * KV};
}

TEST(BlockCheckpoints, EveryBlockRowHoldsThePrefixStateAndOtherRowsStayAlone) {
  // Lengths 10 (shorter than a block), 0, 90 (ends mid-block), 96 (ends on a boundary); block 48
  // (not a multiple of the chunk size, 64).
  const std::vector<int64_t> cu{0, 10, 10, 100, 196};
  const int64_t bs = 48, cols = 2, rows = 12;
  const Tokens x(cu.back());
  const std::vector<float> s0 = filled(4 * HV * KV, 6, -0.5, 0.5);
  const std::vector<int32_t> slots{7, -1, -1, -1, 3, 9, 1, 5};
  std::vector<float> pool(rows * HV * KV, 7.0f), o(x.T * HV * V, NAN);
  GatedDeltaRuleParams p;
  p.seq_len = x.T, p.num_heads = H, p.num_value_heads = HV, p.key_dim = K, p.value_dim = V;
  p.q = x.q.data(), p.k = x.k.data(), p.v = x.v.data(), p.g = x.g.data(), p.beta = x.beta.data();
  p.o = o.data(), p.cu_seqlens = cu.data(), p.num_seqs = 4, p.initial_state = s0.data();
  p.use_qk_l2norm = true;
  StateCheckpoints ck{bs, slots.data(), cols, pool.data(), rows};
  ASSERT_TRUE(chunked_gated_delta_rule(p, ck).ok());
  // {sequence, block, tokens the row's state has seen}
  const std::vector<std::array<int64_t, 3>> written{
      {0, 0, 10}, {2, 0, 48}, {2, 1, 90}, {3, 0, 48}, {3, 1, 96}};
  std::vector<bool> touched(rows, false);
  for (const auto& [s, b, len] : written) {
    const int32_t row = slots[s * cols + b];
    touched[row] = true;
    const auto want = reference_state(x, cu[s], len, s0.data() + s * HV * KV);
    EXPECT_LT(rel(pool.data() + row * HV * KV, want, 0, HV * KV), 1e-5)
        << "seq " << s << " block " << b;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (touched[r]) continue;
    for (int64_t i = 0; i < HV * KV; ++i) ASSERT_EQ(pool[r * HV * KV + i], 7.0f) << "row " << r;
  }
  // The outputs are those of the same prefill without checkpoints.
  std::vector<float> o2(o.size(), NAN);
  p.o = o2.data();
  ASSERT_TRUE(chunked_gated_delta_rule(p).ok());
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(double(o[i]) - o2[i]));
  EXPECT_LT(worst, 1e-5);
}

TEST(BlockCheckpoints, RejectsBadTables) {
  const std::vector<int64_t> cu{0, 100};
  const Tokens x(100);
  std::vector<float> pool(4 * HV * KV), o(x.T * HV * V);
  GatedDeltaRuleParams p;
  p.seq_len = x.T, p.num_heads = H, p.num_value_heads = HV, p.key_dim = K, p.value_dim = V;
  p.q = x.q.data(), p.k = x.k.data(), p.v = x.v.data(), p.g = x.g.data(), p.beta = x.beta.data();
  p.o = o.data(), p.cu_seqlens = cu.data(), p.num_seqs = 1;
  const std::vector<int32_t> two{0, 1}, same{2, 2, 2}, big{0, 1, 4};
  EXPECT_FALSE(chunked_gated_delta_rule(p, {48, two.data(), 2, pool.data(), 4}).ok());  // 3 blocks
  EXPECT_FALSE(chunked_gated_delta_rule(p, {48, same.data(), 3, pool.data(), 4}).ok());
  EXPECT_FALSE(chunked_gated_delta_rule(p, {48, big.data(), 3, pool.data(), 4}).ok());
  EXPECT_FALSE(chunked_gated_delta_rule(p, {0, big.data(), 3, pool.data(), 4}).ok());
  const std::vector<int32_t> ok{0, 1, 3};
  EXPECT_TRUE(chunked_gated_delta_rule(p, {48, ok.data(), 3, pool.data(), 4}).ok());
}

// The decode of N sequences of T tokens of x on a pool of `rows` rows, writing o.
RecurrentDecodeParams pool_decode(const Tokens& x, int64_t N, int64_t T, int64_t rows,
                                  std::vector<float>& pool, std::vector<float>& o) {
  RecurrentDecodeParams p;
  p.num_seqs = N, p.tokens_per_seq = T, p.num_heads = H, p.num_value_heads = HV, p.key_dim = K,
  p.value_dim = V;
  p.q = x.q.data(), p.k = x.k.data(), p.v = x.v.data(), p.g = x.g.data(), p.beta = x.beta.data();
  p.use_qk_l2norm = true;
  p.num_state_rows = rows;
  p.o = o.data(), p.state = pool.data();
  return p;
}

TEST(AcceptedResume, StartsFromTheAcceptedRowAndWritesEveryTokensRow) {
  const int64_t N = 4, T = 3, rows = 16;
  const Tokens x(N * T);
  const std::vector<float> pool0 = filled(rows * HV * KV, 7, -0.5, 0.5);
  const std::vector<int32_t> idx{0, 5, 2, 9, 11, 4, 6, 1, 13, 15, 3, 8};
  const std::vector<int32_t> accepted{1, 3, 2, 3};
  std::vector<float> pool = pool0, o(N * T * HV * V, NAN);
  RecurrentDecodeParams p = pool_decode(x, N, T, rows, pool, o);
  p.state_indices = idx.data(), p.num_accepted_tokens = accepted.data();
  ASSERT_TRUE(recurrent_decode(p).ok());
  // The same kernel told the accepted row as each sequence's slot, keeping every token's state.
  std::vector<float> pool2 = pool0, o2(o.size(), NAN), ts(N * T * HV * KV, NAN);
  std::vector<int32_t> from(N);
  for (int64_t s = 0; s < N; ++s) from[s] = idx[s * T + accepted[s] - 1];
  RecurrentDecodeParams r = p;
  r.state_indices = nullptr, r.num_accepted_tokens = nullptr;
  r.o = o2.data(), r.state = pool2.data(), r.state_slots = from.data(), r.token_states = ts.data();
  ASSERT_TRUE(recurrent_decode(r).ok());
  EXPECT_EQ(o, o2);
  std::vector<bool> written(rows, false);
  for (int64_t s = 0; s < N; ++s)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t row = idx[s * T + t];
      written[row] = true;
      for (int64_t h = 0; h < HV; ++h)
        for (int64_t i = 0; i < KV; ++i)
          ASSERT_EQ(pool[(row * HV + h) * KV + i], ts[((s * T + t) * HV + h) * KV + i])
              << "seq " << s << " token " << t;
    }
  for (int64_t row = 0; row < rows; ++row) {
    if (written[row]) continue;
    for (int64_t i = 0; i < HV * KV; ++i)
      ASSERT_EQ(pool[row * HV * KV + i], pool0[row * HV * KV + i]) << "row " << row;
  }
  // Counts outside 1..T are refused.
  for (int32_t bad : {0, 4}) {
    std::vector<int32_t> a = accepted;
    a[2] = bad;
    p.num_accepted_tokens = a.data();
    EXPECT_FALSE(recurrent_decode(p).ok()) << bad;
  }
}

TEST(TreeVerify, EachTokenIsItsRootPathRunAsAChain) {
  const int64_t N = 2, T = 5, rows = 14;
  const Tokens x(N * T);
  const std::vector<float> pool0 = filled(rows * HV * KV, 8, -0.5, 0.5);
  const std::vector<int32_t> parents{-1, 0, 0, 1, -1, -1, 0, 1, 2, 3};
  const std::vector<int32_t> idx{3, 7, 1, 12, 5, 9, 0, 13, 4, 10}, start{11, 2};
  std::vector<float> pool = pool0, o(N * T * HV * V, NAN);
  RecurrentDecodeParams p = pool_decode(x, N, T, rows, pool, o);
  p.state_indices = idx.data(), p.state_slots = start.data(), p.parents = parents.data();
  ASSERT_TRUE(recurrent_decode(p).ok());
  std::vector<bool> written(rows, false);
  for (int64_t s = 0; s < N; ++s)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int64_t> path;  // token rows from the root down to t
      for (int64_t u = t; u >= 0; u = parents[s * T + u]) path.insert(path.begin(), s * T + u);
      const int64_t L = static_cast<int64_t>(path.size());
      std::vector<float> q, k, v, g, beta;
      for (int64_t r : path) {
        q.insert(q.end(), x.q.begin() + r * H * K, x.q.begin() + (r + 1) * H * K);
        k.insert(k.end(), x.k.begin() + r * H * K, x.k.begin() + (r + 1) * H * K);
        v.insert(v.end(), x.v.begin() + r * HV * V, x.v.begin() + (r + 1) * HV * V);
        g.insert(g.end(), x.g.begin() + r * HV, x.g.begin() + (r + 1) * HV);
        beta.insert(beta.end(), x.beta.begin() + r * HV, x.beta.begin() + (r + 1) * HV);
      }
      std::vector<float> state(pool0.begin() + start[s] * HV * KV,
                               pool0.begin() + (start[s] + 1) * HV * KV);
      std::vector<float> o2(L * HV * V, NAN);
      RecurrentDecodeParams r = p;
      r.num_seqs = 1, r.tokens_per_seq = L, r.num_state_rows = 1;
      r.q = q.data(), r.k = k.data(), r.v = v.data(), r.g = g.data(), r.beta = beta.data();
      r.o = o2.data(), r.state = state.data();
      r.state_indices = nullptr, r.state_slots = nullptr, r.parents = nullptr;
      ASSERT_TRUE(recurrent_decode(r).ok());
      for (int64_t i = 0; i < HV * V; ++i)
        ASSERT_EQ(o[(s * T + t) * HV * V + i], o2[(L - 1) * HV * V + i]) << s << "," << t;
      const int32_t row = idx[s * T + t];
      written[row] = true;
      for (int64_t i = 0; i < HV * KV; ++i)
        ASSERT_EQ(pool[row * HV * KV + i], state[i]) << "seq " << s << " token " << t;
    }
  for (int64_t row = 0; row < rows; ++row) {  // the start rows and unaddressed rows stay
    if (written[row]) continue;
    for (int64_t i = 0; i < HV * KV; ++i)
      ASSERT_EQ(pool[row * HV * KV + i], pool0[row * HV * KV + i]) << "row " << row;
  }
  // A parent at or after its child is refused.
  for (int32_t bad : {2, 3, -2}) {
    std::vector<int32_t> wrong = parents;
    wrong[2] = bad;
    p.parents = wrong.data();
    EXPECT_FALSE(recurrent_decode(p).ok()) << bad;
  }
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
