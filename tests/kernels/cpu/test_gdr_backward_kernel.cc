// The CPU backward kernels of the gated delta rule (chunked and recurrent) against the FP64
// backward (reference/gated_delta_rule_backward.h): per gradient tensor, the relative RMS error
// ||kernel - ref|| / ||ref|| within a bound per storage type (derived below), on packed layouts
// with empty sequences, chunk-edge lengths, a padding tail, GVA, odd head dims, strong gates,
// initial states and dht, in fp32, bf16 and fp16; plus the contract's edges (dead tokens exactly
// zero, pool rows untouched, the same bits for every thread count), the chunked kernel's dg under
// strong decay element by element, the entry point's dispatch, and argument validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "tests/kernels/gdr_backward_testbed.h"

namespace deltacheck::kernels::cpu {
namespace {

using namespace backward_testbed;  // NOLINT(build/namespaces): the tests' own testbed

// The kernels under test; the entry point gated_delta_rule_backward picks one of them.
struct Kernel {
  const char* name;
  Status (*run)(const GatedDeltaRuleBackwardParams&);
};
const Kernel kKernels[] = {{"chunked", chunked_gated_delta_rule_backward},
                           {"recurrent", recurrent_gated_delta_rule_backward}};

class BackwardKernel : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardKernel, MatchesTheFp64Backward) {
  const Case& c = GetParam();
  Problem p(c);
  const auto ref = p.oracle();
  for (const Kernel& kernel : kKernels) {
    Grads d(p);
    ASSERT_TRUE(kernel.run(params(p, d)).ok()) << kernel.name;
    within_bounds(c.name + " " + kernel.name, d, ref);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackwardKernel, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BackwardKernelContract, DeadTokensZeroPoolRowsUntouchedSameBitsForAnyThreadCount) {
  PoolProblem pool;
  for (const Kernel& kernel : kKernels) {
    std::map<int64_t, std::vector<uint8_t>> first;  // per block length
    std::vector<float> first_any;
    for (int threads : {1, 2, 3}) {
      for (int64_t chunk : {1, 7, 64}) {
        Grads d = pool.grads();
        GatedDeltaRuleBackwardParams b = pool.params(d, pool.slots.data(), chunk);
        b.forward.num_threads = threads;
        ASSERT_TRUE(kernel.run(b).ok());
        pool.expect_contract(d, kernel.name);
        // The same bits whatever the thread count. The block length changes the arithmetic
        // (where the recurrent kernel fuses passes over the state; the chunked kernel's whole
        // decomposition), so across block lengths the results agree to fp32 rounding only.
        const std::vector<uint8_t> all = bytes_of(d);
        if (first.count(chunk) == 0) first[chunk] = all;
        ASSERT_EQ(first[chunk], all)
            << kernel.name << ", " << threads << " threads, chunk " << chunk;
        std::vector<float> values(all.size() / sizeof(float));
        std::memcpy(values.data(), all.data(), all.size());
        if (first_any.empty()) first_any = values;
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < values.size(); ++i) {
          num += (double(values[i]) - first_any[i]) * (double(values[i]) - first_any[i]);
          den += double(values[i]) * values[i];
        }
        EXPECT_LT(std::sqrt(num / den), 1e-6) << kernel.name << ", chunk " << chunk;
      }
    }
  }
}

TEST(BackwardKernelContract, Dh0InPlaceOnDhtEqualsSeparateBuffers) {
  Problem p({"", DType::kF32, {0, 30, 30, 75}, 80, 2, 4, 12, 9, -2});
  for (const Kernel& kernel : kKernels) {
    Grads apart(p), in_place(p);
    ASSERT_TRUE(kernel.run(params(p, apart)).ok());
    std::vector<float> state = p.dht.f32;  // dht in, dh0 out, one buffer
    GatedDeltaRuleBackwardParams b = params(p, in_place);
    b.d_final_state = state.data(), b.dh0 = state.data();
    ASSERT_TRUE(kernel.run(b).ok());
    ASSERT_EQ(0, std::memcmp(state.data(), apart.dh0.f32.data(), state.size() * sizeof(float)))
        << kernel.name;
    // Without a dh0 buffer the other gradients are the same.
    Grads no_dh0(p);
    b = params(p, no_dh0);
    b.dh0 = nullptr;
    ASSERT_TRUE(kernel.run(b).ok());
    ASSERT_EQ(0, std::memcmp(no_dh0.dq.f32.data(), apart.dq.f32.data(),
                             apart.dq.f32.size() * sizeof(float)))
        << kernel.name;
    EXPECT_TRUE(std::isnan(no_dh0.dh0.f32[0])) << kernel.name;  // untouched
  }
}

// The chunked and the recurrent kernel compute the same gradients by different arithmetic: they
// agree to fp32 rounding on every tensor, over several chunks with states and GVA.
TEST(BackwardKernelContract, ChunkedAgreesWithRecurrent) {
  Problem p({"", DType::kF32, {0, 1, 130, 130, 300}, 310, 2, 4, 32, 32, -1});
  Grads chunked(p), recurrent(p);
  ASSERT_TRUE(chunked_gated_delta_rule_backward(params(p, chunked)).ok());
  ASSERT_TRUE(recurrent_gated_delta_rule_backward(params(p, recurrent)).ok());
  const std::pair<const Tensor*, const Tensor*> pairs[] = {
      {&chunked.dq, &recurrent.dq},       {&chunked.dk, &recurrent.dk},
      {&chunked.dv, &recurrent.dv},       {&chunked.dg, &recurrent.dg},
      {&chunked.dbeta, &recurrent.dbeta}, {&chunked.dh0, &recurrent.dh0}};
  for (const auto& [a, b] : pairs) {
    std::vector<double> want(b->f32.begin(), b->f32.end());
    const double e = rel_rms(*a, want);
    EXPECT_LT(e, 2e-6);
    EXPECT_GT(e, 0.0);  // different arithmetic: not the same kernel twice
  }
}

// The entry point runs the chunked kernel unless asked for the recurrent one, bit for bit.
TEST(BackwardKernelContract, EntryPointDispatches) {
  Problem p({"", DType::kF32, {0, 70, 100}, 100, 1, 2, 8, 8, -1});
  Grads entry(p), chunked(p), entry_rec(p), recurrent(p);
  ASSERT_TRUE(gated_delta_rule_backward(params(p, entry)).ok());
  ASSERT_TRUE(chunked_gated_delta_rule_backward(params(p, chunked)).ok());
  GatedDeltaRuleBackwardParams b = params(p, entry_rec);
  b.chunked = false;
  ASSERT_TRUE(gated_delta_rule_backward(b).ok());
  ASSERT_TRUE(recurrent_gated_delta_rule_backward(params(p, recurrent)).ok());
  const size_t bytes = entry.dk.f32.size() * sizeof(float);
  EXPECT_EQ(0, std::memcmp(entry.dk.f32.data(), chunked.dk.f32.data(), bytes));
  EXPECT_EQ(0, std::memcmp(entry_rec.dk.f32.data(), recurrent.dk.f32.data(), bytes));
  EXPECT_NE(0, std::memcmp(entry.dk.f32.data(), entry_rec.dk.f32.data(), bytes));
}

// Under strong decay most dg are tiny (each carries its token's exp(g) < 5e-5) while their
// neighbours' are O(1): a chunked form that takes dg as a difference of cumulative sums loses
// every digit of the tiny ones, which the tensor-wide error hides. Element by element, the
// chunked kernel's dg stays within a relative error of fp32 rounding times the chunk.
TEST(BackwardKernelContract, ChunkedDgElementwiseUnderStrongDecay) {
  Case c{"", DType::kF32, {0, 64, 64, 150}, 150, 1, 2, 16, 16, -20};
  Problem p(c);
  // Every 3rd token weak (g in [-0.5, 0)), the others strong: some chunks' sums then mix both.
  for (int64_t i = 0; i < p.g.size(); ++i)
    if ((i / p.HV) % 3 == 0) {
      p.g.f32[i] = static_cast<float>(-0.5 * (i % 7 + 1) / 7.0);
      p.g.f64[i] = p.g.f32[i];
    } else {
      p.g.f32[i] = static_cast<float>(-10.0 - 10.0 * (i % 5) / 5.0);
      p.g.f64[i] = p.g.f32[i];
    }
  const auto ref = p.oracle();
  for (const Kernel& kernel : kKernels) {
    Grads d(p);
    ASSERT_TRUE(kernel.run(params(p, d)).ok());
    double worst = 0.0, smallest = 1e300;
    for (int64_t i = 0; i < d.dg.size(); ++i) {
      if (ref.dg[i] == 0.0) continue;
      worst = std::max(worst, std::abs(d.dg.f32[i] - ref.dg[i]) / std::abs(ref.dg[i]));
      smallest = std::min(smallest, std::abs(ref.dg[i]));
    }
    std::printf("[ measured ] %s dg elementwise: worst %.1e, smallest |dg| %.1e\n", kernel.name,
                worst, smallest);
    EXPECT_LT(smallest, 1e-8);  // the problem has tiny dg
    EXPECT_LT(worst, 1e-3) << kernel.name;
  }
}

TEST(BackwardKernelContract, RejectsInvalidArguments) {
  Problem p({"", DType::kF32, {0, 10, 20}, 20, 1, 1, 4, 4, -1});
  for (const Kernel& kernel : kKernels) {
    Grads d(p);
    GatedDeltaRuleBackwardParams b = params(p, d);
    b.dg = nullptr;
    EXPECT_EQ(kernel.run(b).code(), StatusCode::kInvalidArgument);
    b = params(p, d);
    std::vector<int64_t> past{0, 10, 21};
    b.forward.cu_seqlens = past.data();
    const Status st = kernel.run(b);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("past T"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace deltacheck::kernels::cpu
