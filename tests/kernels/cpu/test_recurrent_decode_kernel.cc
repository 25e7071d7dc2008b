// The CPU recurrent decode kernel against the FP64 reference: one- and multi-token steps in place
// on a state pool equal the prefill of the concatenation, and the slots it refuses
// (layer_kernels_testbed.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/recurrent_decode.h"
#include "reference/gated_delta_rule.h"
#include "tests/kernels/cpu/layer_kernels_testbed.h"

namespace deltacheck::kernels::cpu {
namespace {

namespace ref = deltacheck::reference;
using namespace layer_testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---------------------------------------------------------------------------------------------
// recurrent decode

// A gated-delta-rule problem whose tokens are addressed by (sequence, position).
struct RuleProblem {
  int64_t H = 2, HV = 4, K = 20, V = 12;  // GVA 2, dims off the vector width
  DType dt;
  TokenSource src{600};
  bool l2norm = true;
  double qk_range = 1.0;  // q, k in [-qk_range, qk_range]
  double scale = 0.0;     // <= 0: the default K^-0.5

  std::vector<double> q(const std::vector<TokenRef>& t) const {
    return gather(src, kQ, t, H * K, -qk_range, qk_range, dt);
  }
  std::vector<double> k(const std::vector<TokenRef>& t) const {
    return gather(src, kK, t, H * K, -qk_range, qk_range, dt);
  }
  std::vector<double> v(const std::vector<TokenRef>& t) const {
    return gather(src, kV, t, HV * V, -1.0, 1.0, dt);
  }
  std::vector<double> g(const std::vector<TokenRef>& t) const {
    return gather(src, kG, t, HV, -1.5, -0.01, DType::kF32);
  }
  std::vector<double> beta(const std::vector<TokenRef>& t) const {
    return gather(src, kBeta, t, HV, 0.05, 0.95, dt);
  }
  int64_t state_size() const { return HV * K * V; }

  // The reference over tokens [0, end_i) of every sequence i, from the given initial states.
  ref::GatedDeltaRuleResult reference(const std::vector<int64_t>& end,
                                      const std::vector<double>* initial) const {
    const Packing pk = pack(std::vector<int64_t>(end.size(), 0), end);
    const std::vector<double> qv = q(pk.tokens), kv = k(pk.tokens), vv = v(pk.tokens),
                              gv = g(pk.tokens), bv = beta(pk.tokens);
    ref::GatedDeltaRuleArgs a;
    a.seq_len = pk.cu.back();
    a.num_heads = H;
    a.num_value_heads = HV;
    a.key_dim = K;
    a.value_dim = V;
    // Non-null even when there are no tokens at all.
    const double none = 0.0;
    a.q = qv.empty() ? &none : qv.data();
    a.k = kv.empty() ? &none : kv.data();
    a.v = vv.empty() ? &none : vv.data();
    a.g = gv.empty() ? &none : gv.data();
    a.beta = bv.empty() ? &none : bv.data();
    a.cu_seqlens = pk.cu;
    a.initial_state = initial ? initial->data() : nullptr;
    a.use_qk_l2norm = l2norm;
    if (scale > 0.0) a.scale = scale;
    return ref::gated_delta_rule(a);
  }
};

struct DecodeBuffers {
  Buffer q, k, v, beta, o;
  std::vector<float> g;
  DecodeBuffers(const RuleProblem& pr, const std::vector<TokenRef>& toks)
      : q(Buffer::of(pr.q(toks), pr.dt)),
        k(Buffer::of(pr.k(toks), pr.dt)),
        v(Buffer::of(pr.v(toks), pr.dt)),
        beta(Buffer::of(pr.beta(toks), pr.dt)),
        o(Buffer::poisoned(static_cast<int64_t>(toks.size()) * pr.HV * pr.V, pr.dt)),
        g(to_float(pr.g(toks))) {}
  RecurrentDecodeParams params(const RuleProblem& pr, int64_t n, int64_t tokens) {
    RecurrentDecodeParams p;
    p.num_seqs = n;
    p.tokens_per_seq = tokens;
    p.num_heads = pr.H;
    p.num_value_heads = pr.HV;
    p.key_dim = pr.K;
    p.value_dim = pr.V;
    p.dtype = pr.dt;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.g = g.data();
    p.beta = beta.data();
    p.o = o.data();
    p.use_qk_l2norm = pr.l2norm;
    p.scale = static_cast<float>(pr.scale);
    p.num_threads = 2;
    return p;
  }
};

// Output tolerance of the fp32 recurrence plus one rounding of the output to the dtype.
double decode_rtol(DType dt) { return 1e-4 + roundoff(dt); }

class RecurrentDecodeKernel : public ::testing::TestWithParam<DType> {};

// The pool holds the reference state after each sequence's prefix; decode steps of one token
// each, in place, then match the reference prefill of prefix + steps.
TEST_P(RecurrentDecodeKernel, StepsEqualPrefillOfConcatenation) {
  RuleProblem pr;
  pr.dt = GetParam();
  const std::vector<int64_t> prefix = {0, 3, 17, 1, 9};
  const std::vector<int32_t> slots = {4, -1, 0, 6, 2};
  const int64_t N = static_cast<int64_t>(prefix.size()), steps = 4, SS = pr.state_size();
  Pool before(8, SS, 11);
  const ref::GatedDeltaRuleResult pre = pr.reference(prefix, nullptr);
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0)
      for (int64_t e = 0; e < SS; ++e)
        before.data[slots[n] * SS + e] = static_cast<float>(pre.final_state[n * SS + e]);
  Pool pool = before;

  std::vector<int64_t> full(N);
  for (int64_t n = 0; n < N; ++n) full[n] = prefix[n] + steps;
  const ref::GatedDeltaRuleResult want = pr.reference(full, nullptr);
  const std::vector<int64_t> cu = pack(std::vector<int64_t>(N, 0), full).cu;
  const double scale = std::max(1.0, max_abs(want.output));
  const int64_t row = pr.HV * pr.V;

  for (int64_t s = 0; s < steps; ++s) {
    std::vector<TokenRef> step;
    for (int64_t n = 0; n < N; ++n) step.push_back({n, prefix[n] + s});
    DecodeBuffers b(pr, step);
    RecurrentDecodeParams p = b.params(pr, N, 1);
    p.state = pool.data.data();
    p.state_slots = slots.data();
    p.num_state_rows = pool.rows;
    ASSERT_TRUE(recurrent_decode(p).ok());
    for (int64_t n = 0; n < N; ++n) {
      if (slots[n] < 0) {
        EXPECT_TRUE(all_nan(b.o, n * row, (n + 1) * row)) << "padding entry wrote output";
        continue;
      }
      const int64_t at = (cu[n] + prefix[n] + s) * row;
      EXPECT_TRUE(close("o", read(b.o, n * row, (n + 1) * row), slice(want.output, at, at + row),
                        1e-5 * scale, decode_rtol(pr.dt)))
          << "sequence " << n << " step " << s;
    }
  }
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0) {
      EXPECT_TRUE(close("state", read(pool.data, slots[n] * SS, (slots[n] + 1) * SS),
                        slice(want.final_state, n * SS, (n + 1) * SS), 1e-5, 1e-4))
          << "sequence " << n;
    }
  expect_untouched_rows(before, pool, slots);
}

// Multi-token (speculative) decode: the state after every draft token comes out, and resuming
// from an accepted one continues the sequence as if the rejected tokens had never been seen.
TEST_P(RecurrentDecodeKernel, MultiTokenWritesStatePerToken) {
  RuleProblem pr;
  pr.dt = GetParam();
  pr.l2norm = false;  // q and k as given, kept small so that beta |k|^2 < 2 (stable)
  pr.qk_range = 0.5;
  pr.scale = 0.3;
  pr.K = 8;
  const std::vector<int64_t> prefix = {5, 0, 2};
  const std::vector<int32_t> slots = {1, 3, -1};
  const int64_t N = static_cast<int64_t>(prefix.size()), drafts = 3, SS = pr.state_size();
  const int64_t row = pr.HV * pr.V;
  Pool before(5, SS, 12);
  const ref::GatedDeltaRuleResult pre = pr.reference(prefix, nullptr);
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0)
      for (int64_t e = 0; e < SS; ++e)
        before.data[slots[n] * SS + e] = static_cast<float>(pre.final_state[n * SS + e]);
  Pool pool = before;

  std::vector<TokenRef> toks;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < drafts; ++t) toks.push_back({n, prefix[n] + t});
  DecodeBuffers b(pr, toks);
  std::vector<float> token_states(static_cast<size_t>(N * drafts * SS), std::nanf(""));
  RecurrentDecodeParams p = b.params(pr, N, drafts);
  p.state = pool.data.data();
  p.state_slots = slots.data();
  p.num_state_rows = pool.rows;
  p.token_states = token_states.data();
  ASSERT_TRUE(recurrent_decode(p).ok());

  for (int64_t t = 0; t < drafts; ++t) {
    std::vector<int64_t> end(N);
    for (int64_t n = 0; n < N; ++n) end[n] = prefix[n] + t + 1;
    const ref::GatedDeltaRuleResult want = pr.reference(end, nullptr);
    const std::vector<int64_t> cu = pack(std::vector<int64_t>(N, 0), end).cu;
    ASSERT_GT(max_abs(want.final_state), 0.01);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = (n * drafts + t) * SS;
      if (slots[n] < 0) {
        for (int64_t e = 0; e < SS; ++e) ASSERT_TRUE(std::isnan(token_states[at + e]));
        EXPECT_TRUE(all_nan(b.o, (n * drafts + t) * row, (n * drafts + t + 1) * row));
        continue;
      }
      EXPECT_TRUE(close("token state", read(token_states, at, at + SS),
                        slice(want.final_state, n * SS, (n + 1) * SS), 1e-5, 1e-4))
          << "sequence " << n << " token " << t;
      const int64_t o_at = (cu[n + 1] - 1) * row;
      EXPECT_TRUE(close("o", read(b.o, (n * drafts + t) * row, (n * drafts + t + 1) * row),
                        slice(want.output, o_at, o_at + row), 1e-5, decode_rtol(pr.dt)))
          << "sequence " << n << " token " << t;
    }
  }
  // The pool holds the state after the last draft token.
  for (int64_t n = 0; n < N; ++n)
    if (slots[n] >= 0) {
      EXPECT_EQ(
          std::memcmp(&pool.data[slots[n] * SS], &token_states[(n * drafts + drafts - 1) * SS],
                      static_cast<size_t>(SS) * sizeof(float)),
          0)
          << "sequence " << n;
    }
  expect_untouched_rows(before, pool, slots);

  // Sequence 0 accepts 2 of its 3 drafts: resume from token_states[0, 1] with the next token.
  const int64_t accepted = 2;
  std::copy_n(&token_states[(0 * drafts + accepted - 1) * SS], SS, &pool.data[slots[0] * SS]);
  const TokenRef next{0, 1000};  // a token the sequence has not seen, placed after the accepted
  DecodeBuffers nb(pr, {next});
  RecurrentDecodeParams np = nb.params(pr, 1, 1);
  np.state = pool.data.data();
  np.state_slots = &slots[0];
  np.num_state_rows = pool.rows;
  ASSERT_TRUE(recurrent_decode(np).ok());
  // Reference: prefix + accepted drafts, then `next`; built as one sequence of explicit tokens.
  std::vector<TokenRef> seq;
  for (int64_t t = 0; t < prefix[0] + accepted; ++t) seq.push_back({0, t});
  seq.push_back(next);
  const std::vector<double> qv = pr.q(seq), kv = pr.k(seq), vv = pr.v(seq), gv = pr.g(seq),
                            bv = pr.beta(seq);
  ref::GatedDeltaRuleArgs a;
  a.seq_len = static_cast<int64_t>(seq.size());
  a.num_heads = pr.H;
  a.num_value_heads = pr.HV;
  a.key_dim = pr.K;
  a.value_dim = pr.V;
  a.q = qv.data();
  a.k = kv.data();
  a.v = vv.data();
  a.g = gv.data();
  a.beta = bv.data();
  a.use_qk_l2norm = pr.l2norm;
  a.scale = pr.scale;
  const ref::GatedDeltaRuleResult resumed = ref::gated_delta_rule(a);
  EXPECT_TRUE(close("resumed o", read(nb.o, 0, row),
                    slice(resumed.output, (a.seq_len - 1) * row, a.seq_len * row), 1e-5,
                    decode_rtol(pr.dt)));
  EXPECT_TRUE(close("resumed state", read(pool.data, slots[0] * SS, (slots[0] + 1) * SS),
                    resumed.final_state, 1e-5, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Types, RecurrentDecodeKernel, kAllTypes, dtype_name);

TEST(RecurrentDecodeKernelArgs, RejectsSharedOrOutOfRangeSlots) {
  const float in[64] = {};
  float o[64], state[2 * 4] = {};
  RecurrentDecodeParams p;
  p.num_seqs = 2;
  p.key_dim = 2;
  p.value_dim = 2;
  p.q = p.k = p.v = p.beta = in;
  p.g = in;
  p.o = o;
  p.state = state;
  p.num_state_rows = 2;
  const int32_t shared[2] = {1, 1}, out_of_range[2] = {0, 2}, fine[2] = {1, -1};
  p.state_slots = shared;
  EXPECT_EQ(recurrent_decode(p).code(), StatusCode::kInvalidArgument);
  p.state_slots = out_of_range;
  EXPECT_EQ(recurrent_decode(p).code(), StatusCode::kInvalidArgument);
  p.state_slots = fine;
  EXPECT_TRUE(recurrent_decode(p).ok());
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
