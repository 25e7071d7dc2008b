// The CPU gated-delta-rule kernels on raw buffers: against the FP64 reference across chunk sizes,
// state pools addressed through slots (padding skipped, other slots untouched), in-place states
// and argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/gated_delta_rule.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::kernels::cpu {
namespace {

struct Rng {
  uint64_t s;
  double next() {  // splitmix64 -> [-1, 1)
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-52 - 1.0;
  }
};

struct Problem {
  int64_t T, H = 2, HV = 4, K = 32, V = 24;
  std::vector<int64_t> cu;
  std::vector<float> q, k, v, g, beta, s0;
  explicit Problem(std::vector<int64_t> cu_) : T(cu_.back()), cu(std::move(cu_)) {
    Rng r{42};
    auto fill = [&](std::vector<float>& x, size_t n, double lo, double hi) {
      x.resize(n);
      for (auto& e : x) e = static_cast<float>(lo + (hi - lo) * (r.next() + 1) / 2);
    };
    fill(q, T * H * K, -1, 1);
    fill(k, T * H * K, -1, 1);
    fill(v, T * HV * V, -1, 1);
    fill(g, T * HV, -3, -0.01);
    fill(beta, T * HV, 0.05, 0.95);
    fill(s0, (cu.size() - 1) * HV * K * V, -0.5, 0.5);
  }
  int64_t n() const { return static_cast<int64_t>(cu.size()) - 1; }
  GatedDeltaRuleParams params(std::vector<float>& o) const {
    o.assign(T * HV * V, NAN);
    GatedDeltaRuleParams p;
    p.seq_len = T, p.num_heads = H, p.num_value_heads = HV, p.key_dim = K, p.value_dim = V;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.g = g.data(), p.beta = beta.data();
    p.o = o.data();
    p.cu_seqlens = cu.data();
    p.num_seqs = n();
    p.initial_state = s0.data();
    p.use_qk_l2norm = true;
    return p;
  }
  reference::GatedDeltaRuleResult oracle() const {
    auto d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    static thread_local std::vector<double> dq, dk, dv, dg, db, ds;
    dq = d(q), dk = d(k), dv = d(v), dg = d(g), db = d(beta), ds = d(s0);
    reference::GatedDeltaRuleArgs a;
    a.seq_len = T, a.num_heads = H, a.num_value_heads = HV, a.key_dim = K, a.value_dim = V;
    a.q = dq.data(), a.k = dk.data(), a.v = dv.data(), a.g = dg.data(), a.beta = db.data();
    a.cu_seqlens = cu;
    a.initial_state = ds.data();
    a.use_qk_l2norm = true;
    return reference::gated_delta_rule(a);
  }
};

double rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

TEST(ChunkedKernel, MatchesReferenceAtEveryChunkSize) {
  const Problem pb({0, 63, 63, 128, 129, 200});
  const auto ref = pb.oracle();
  for (int64_t chunk : {1, 7, 16, 64, 128}) {
    std::vector<float> o, fs(pb.s0.size(), NAN);
    GatedDeltaRuleParams p = pb.params(o);
    p.final_state = fs.data();
    p.chunk_size = chunk;
    ASSERT_TRUE(chunked_gated_delta_rule(p).ok());
    EXPECT_LT(rel(o, ref.output), 2e-6) << chunk;
    EXPECT_LT(rel(fs, ref.final_state), 2e-6) << chunk;
  }
  std::vector<float> o, fs(pb.s0.size());
  GatedDeltaRuleParams p = pb.params(o);
  p.final_state = fs.data();
  ASSERT_TRUE(recurrent_gated_delta_rule(p).ok());
  EXPECT_LT(rel(o, ref.output), 1e-6);
}

TEST(ChunkedKernel, StatePoolThroughSlotsSkipsPaddingAndLeavesOtherSlotsAlone) {
  const Problem pb({0, 40, 70, 90});
  const int64_t per = pb.HV * pb.K * pb.V, slots = 6;
  // Pool: sequence i lives in slot {4, -1, 1}[i]; the padding entry (-1) is not computed.
  std::vector<float> pool(slots * per);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<float>(std::sin(0.1 * i));
  const std::vector<int32_t> slot{4, -1, 1};
  std::vector<float> s0 = pb.s0;  // reference initial states: pool rows of each sequence
  for (int64_t i = 0; i < 3; ++i)
    if (slot[i] >= 0) std::memcpy(&s0[i * per], &pool[slot[i] * per], per * sizeof(float));
  Problem ref_pb = pb;
  ref_pb.s0 = s0;
  const auto ref = ref_pb.oracle();
  const std::vector<float> before = pool;
  std::vector<float> o;
  GatedDeltaRuleParams p = pb.params(o);
  p.initial_state = pool.data();
  p.final_state = pool.data();  // in place
  p.state_slots = slot.data();
  p.num_state_rows = slots;
  ASSERT_TRUE(chunked_gated_delta_rule(p).ok());
  for (int64_t s : {0, 2, 3, 5})
    for (int64_t i = 0; i < per; ++i) ASSERT_EQ(pool[s * per + i], before[s * per + i]) << s;
  for (int64_t i = 0; i < 3; ++i) {
    if (slot[i] < 0) {
      for (int64_t j = pb.cu[i] * pb.HV * pb.V; j < pb.cu[i + 1] * pb.HV * pb.V; ++j)
        ASSERT_TRUE(std::isnan(o[j]));  // padding entry: output untouched
      continue;
    }
    std::vector<float> got(pool.begin() + slot[i] * per, pool.begin() + (slot[i] + 1) * per);
    std::vector<double> want(ref.final_state.begin() + i * per,
                             ref.final_state.begin() + (i + 1) * per);
    EXPECT_LT(rel(got, want), 2e-6);
  }
}

TEST(ChunkedKernel, RejectsInvalidArguments) {
  const Problem pb({0, 10, 20});
  std::vector<float> o;
  GatedDeltaRuleParams p = pb.params(o);
  std::vector<int64_t> bad{0, 15, 10};
  bad.back() = 20;
  bad[1] = 25;
  p.cu_seqlens = bad.data();
  EXPECT_EQ(chunked_gated_delta_rule(p).code(), StatusCode::kInvalidArgument);
  p = pb.params(o);
  p.num_heads = 3;
  EXPECT_EQ(chunked_gated_delta_rule(p).code(), StatusCode::kInvalidArgument);
  p = pb.params(o);
  const std::vector<int32_t> slot{0, 9};
  p.state_slots = slot.data();
  p.num_state_rows = 2;
  const Status st = chunked_gated_delta_rule(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot 9"), std::string::npos) << st.message();
}

// DType is one enum from the generator to the kernels: the kernels name the types they do not
// compute in instead of reading the buffers as something else.
TEST(ChunkedKernel, RejectsDtypesItDoesNotComputeIn) {
  const Problem pb({0, 10, 20});
  std::vector<float> o;
  for (DType t : {DType::kF64, DType::kI32, DType::kU8}) {
    GatedDeltaRuleParams p = pb.params(o);
    p.dtype = t;
    for (const Status& st : {chunked_gated_delta_rule(p), recurrent_gated_delta_rule(p)}) {
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << dtype_name(t);
      EXPECT_NE(st.message().find(dtype_name(t)), std::string::npos) << st.message();
    }
  }
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
