// Shared pieces of the benchmarks: cheap deterministic input fills, the nominal operation count of
// the gated delta rule, and the counters every figure reports (tokens/s, FLOP/s, bytes/s).
//
// Speed does not depend on the exact input values, only on their ranges (denormals or overflow
// would distort it), so the fills are a plain SplitMix64 stream rather than the case generator.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace deltacheck::bench {

// Uniform floats in [lo, hi) from a SplitMix64 stream.
inline std::vector<float> uniform(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : x) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v = lo + (hi - lo) * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
  return x;
}

// Gated-delta-rule inputs in the ranges a Qwen3-Next layer produces: q, k O(1) (normalized in the
// kernel), weak decay g in [-0.5, -0.01), beta in (0.1, 0.9), state entries O(0.1).
struct GdrInputs {
  std::vector<float> q, k, v, g, beta;
  GdrInputs(int64_t tokens, int64_t H, int64_t HV, int64_t K, int64_t V)
      : q(uniform(tokens * H * K, -1.0f, 1.0f, 1)),
        k(uniform(tokens * H * K, -1.0f, 1.0f, 2)),
        v(uniform(tokens * HV * V, -1.0f, 1.0f, 3)),
        g(uniform(tokens * HV, -0.5f, -0.01f, 4)),
        beta(uniform(tokens * HV, 0.1f, 0.9f, 5)) {}
};

// The nominal operation count of the rule, as the issue defines it: 4 T HV K V (two K x V
// products per token and head: S^T k and S^T q, with the rank-1 update counted in them).
inline double gdr_nominal_flops(int64_t tokens, int64_t HV, int64_t K, int64_t V) {
  return 4.0 * static_cast<double>(tokens) * HV * K * V;
}

// Per-iteration counters: tokens/s as items, nominal FLOP/s, and bytes/s when bytes > 0.
inline void set_counters(benchmark::State& st, int64_t tokens, double flops, double bytes = 0) {
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations()) * tokens);
  if (flops > 0)
    st.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(st.iterations()),
                                               benchmark::Counter::kIsRate);
  if (bytes > 0) st.SetBytesProcessed(static_cast<int64_t>(bytes * st.iterations()));
}

}  // namespace deltacheck::bench
