// The CUDA backward of the gated delta rule (kernels/cuda/gated_delta_rule_backward_math.h) run
// on the host, without CUDA: the same item and reduction bodies the kernels run, driven by a host
// emulation of the grid (CTAs in turn, each looping over its items as the grid-stride loop does;
// within a CTA the 256 threads of every phase in turn, which is what the barrier between phases
// guarantees on the device), on the same workspace layout, against the FP64 backward
// (reference/gated_delta_rule_backward.h) with the CPU kernels' bounds (gdr_backward_testbed.h).
//
// What it does not cover (docs/cuda.md, "The backward"): the launch configuration and the real
// grid's indexing (blockIdx, gridDim, the occupancy-sized grid), shared memory sizes and limits,
// missing or misplaced barriers and races (the emulation runs phases strictly apart), the
// device's dtype conversions and expf (the host uses core/half.h and std::exp), CUDA errors.
//
// Built twice: test_kernels_cuda_host, and test_kernels_cuda_host_mutant from a copy of the header
// with one line planted (tests/CMakeLists.txt): the state gradient of an item is not reset when
// there is no dht, so a CTA carries the last item's dS into the next sequence. The same tests
// must then fail on every case without dht (and still pass the others).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/gated_delta_rule_backward_math.h"
#include "tests/kernels/gdr_backward_testbed.h"

namespace deltacheck::kernels::cuda::gdr_bwd {
namespace {

using namespace backward_testbed;  // NOLINT(build/namespaces): the tests' own testbed

#ifdef DELTACHECK_PLANTED_BUG
constexpr bool kPlanted = true;
#else
constexpr bool kPlanted = false;
#endif

// Exec on the host: one phase runs thread 0 .. 255 in turn; each thread keeps its registers.
struct HostExec {
  std::vector<Regs> regs = std::vector<Regs>(kThreads);
  template <typename F>
  void each(F&& f) {
    for (int tid = 0; tid < kThreads; ++tid) f(tid, regs[static_cast<size_t>(tid)]);
  }
};

// Runs the backward of b on host buffers as the grid of `ctas` CTAs would: workspace and shared
// memory poisoned (NaN), the live flags zeroed as the launcher does.
template <typename T>
void emulate(const GatedDeltaRuleBackwardParams& b, int64_t ctas) {
  Args a = make_args(b);
  std::vector<float> workspace(
      static_cast<size_t>(carve_workspace(a, ctas, nullptr)) / sizeof(float) + 1,
      std::numeric_limits<float>::quiet_NaN());
  carve_workspace(a, ctas, reinterpret_cast<char*>(workspace.data()));
  std::memset(a.live, 0, static_cast<size_t>(a.num_tokens));
  std::vector<float> smem(static_cast<size_t>(smem_floats(a.key_dim)),
                          std::numeric_limits<float>::quiet_NaN());
  const Smem s = carve(smem.data(), a.key_dim);
  for (int64_t cta = 0; cta < ctas; ++cta) {
    HostExec ex;  // a CTA's registers persist across its items, as on the device
    float* states = a.block_states + cta * block_state_floats(a.key_dim, a.block_len);
    for (int64_t item = cta; item < a.num_items; item += ctas)
      backward_item<T>(ex, a, item, s, states);
  }
  std::vector<float> reduce_smem(static_cast<size_t>(reduce_smem_floats()));
  HostExec ex;
  for (int64_t item = 0; item < a.num_tokens * a.num_heads; ++item)
    reduce_token<T>(ex, a, item, reduce_smem.data());
}

void emulate(const GatedDeltaRuleBackwardParams& b, int64_t ctas) {
  switch (b.forward.dtype) {
    case DType::kBF16:
      return emulate<Bf16>(b, ctas);
    case DType::kF16:
      return emulate<F16>(b, ctas);
    default:
      return emulate<float>(b, ctas);
  }
}

struct EmulatedCase {
  Case c;
  int64_t ctas;  // fewer than the items: CTAs loop over several items
};

void PrintTo(const EmulatedCase& e, std::ostream* os) {
  *os << e.c.name << " on " << e.ctas << " CTAs";
}

class CudaBackwardEmulation : public ::testing::TestWithParam<EmulatedCase> {};

// Every gradient within the CPU kernels' bound of the FP64 backward (NaN: unwritten). With the
// planted bug, a case without dht must fail on some tensor, a case with dht must still pass.
TEST_P(CudaBackwardEmulation, MatchesTheFp64Backward) {
  const Case& c = GetParam().c;
  Problem p(c);
  Grads d(p);
  emulate(params(p, d), GetParam().ctas);
  const bool within = within_bounds(c.name, d, p.oracle(), /*expect=*/!kPlanted);
  if (kPlanted) {
    if (c.dht) {
      EXPECT_TRUE(within) << "the planted bug acts only without dht";
    } else {
      EXPECT_FALSE(within) << "the planted bug (dS carried into the next item) went unnoticed";
    }
  }
}

// The CPU kernels' problems (gdr_backward_testbed.h; two of them without dht), plus value dims
// over one block of 32 columns (the reduction over value blocks), K = 128 and packed sequences
// without dht; each on a grid of 2 to 4 CTAs, fewer than its items, so that CTAs loop.
std::vector<EmulatedCase> emulated_cases() {
  std::vector<Case> cases = kernel_cases();
  cases.push_back({"fp32_packed_gva_two_value_blocks",
                   DType::kF32,
                   {0, 0, 37, 37, 150, 160},
                   170,
                   2,
                   4,
                   32,
                   40,
                   -3});
  cases.push_back({"fp32_no_dht_packed_h0",
                   DType::kF32,
                   {0, 40, 40, 100},
                   110,
                   2,
                   2,
                   16,
                   33,
                   -2,
                   1,
                   true,
                   true,
                   false});
  cases.push_back({"fp32_k128_two_value_blocks", DType::kF32, {0, 70, 75}, 80, 1, 2, 128, 64, -1});
  std::vector<EmulatedCase> out;
  for (size_t i = 0; i < cases.size(); ++i)
    out.push_back({cases[i], 2 + static_cast<int64_t>(i % 3)});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Host, CudaBackwardEmulation, ::testing::ValuesIn(emulated_cases()),
                         [](const auto& info) { return info.param.c.name; });

#ifndef DELTACHECK_PLANTED_BUG  // the mutant builds only the comparison above
// The contract's edges on the emulated kernels: padding entries (negative slots) and the tail
// get exactly zero gradients, pool rows nobody addresses keep their bits, and the result does not
// depend on the grid size or on the block length's bits (the same bits for 1 and 4 CTAs).
TEST(CudaBackwardEmulationContract, DeadTokensZeroPoolRowsUntouchedSameBitsForAnyGrid) {
  PoolProblem pool;
  std::vector<uint8_t> first;
  for (int64_t ctas : {1, 4}) {
    Grads d = pool.grads();
    emulate(pool.params(d, pool.slots.data(), 7), ctas);
    pool.expect_contract(d, std::to_string(ctas) + " CTAs");
    for (const Tensor* x : {&d.dq, &d.dk, &d.dv, &d.dg, &d.dbeta, &d.dh0})
      for (float e : x->f32) ASSERT_FALSE(std::isnan(e));  // every element written
    if (first.empty()) first = bytes_of(d);
    ASSERT_EQ(first, bytes_of(d)) << ctas << " CTAs";
  }
}

// dh0 may be dht's own buffer (in place): the same bits as separate buffers.
TEST(CudaBackwardEmulationContract, Dh0InPlaceOnDht) {
  Problem p({"", DType::kF32, {0, 30, 30, 75}, 80, 2, 4, 12, 9, -2});
  Grads apart(p), in_place(p);
  emulate(params(p, apart), 3);
  std::vector<float> state = p.dht.f32;
  GatedDeltaRuleBackwardParams b = params(p, in_place);
  b.d_final_state = state.data(), b.dh0 = state.data();
  emulate(b, 3);
  EXPECT_EQ(0, std::memcmp(state.data(), apart.dh0.f32.data(), state.size() * sizeof(float)));
}

// The checkpoint slots (checkpoint()) of consecutive sequences never overlap and stay below
// num_checkpoints, for every block length, on a layout with empty and short sequences.
TEST(CudaBackwardEmulationContract, CheckpointSlotsAreDisjoint) {
  const std::vector<int64_t> cu{0, 0, 1, 64, 64, 65, 129, 200, 263, 263};
  for (int block = 1; block <= kMaxBlock; ++block) {
    Args a{};
    a.num_value_heads = 1, a.num_value_blocks = 1, a.key_dim = 1, a.block_len = block;
    const int64_t count = num_checkpoints(static_cast<int64_t>(cu.size()) - 1, cu.back(), block);
    std::vector<float> slots(static_cast<size_t>(count * kLanes));
    a.checkpoints = slots.data();
    std::vector<int> used(static_cast<size_t>(count), 0);
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      Item w{};
      w.seq = static_cast<int64_t>(s), w.bos = cu[s], w.len = cu[s + 1] - cu[s];
      for (int64_t b = 0; b * block < w.len; ++b) {
        const int64_t slot = (checkpoint(a, w, b) - slots.data()) / kLanes;
        ASSERT_LT(slot, count) << block;
        ASSERT_EQ(used[static_cast<size_t>(slot)]++, 0) << "block " << block << " seq " << s;
      }
    }
  }
}

#endif  // DELTACHECK_PLANTED_BUG

}  // namespace
}  // namespace deltacheck::kernels::cuda::gdr_bwd
