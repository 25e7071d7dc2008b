// The FP64 oracle and the preparation of a long case (docs/performance.md, "Long context"): the
// reference recurrence alone at T = 1K .. 128K tokens on the head shapes of the full suite's long
// cases (K = V = 16 with HV = 2, and Qwen's K = V = 128), and harness::prepare() of one long case
// id (inputs, the FP64 expectation and the three same-precision baselines).
//   deltacheck_bench --benchmark_filter='oracle_gdr|prepare_long'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cases/case.h"
#include "harness/runner.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::bench {
namespace {

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// oracle_gdr/T/HV/K: the FP64 recurrence on one sequence of T tokens, H = 1, K = V, L2 norm on,
// a random initial state (as the long cases have).
void BM_oracle(benchmark::State& st) {
  const int64_t T = st.range(0), HV = st.range(1), K = st.range(2);
  const GdrInputs in(T, 1, HV, K, K);
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v), g = widen(in.g),
                            beta = widen(in.beta), s0 = widen(uniform(HV * K * K, -0.1f, 0.1f, 6));
  reference::GatedDeltaRuleArgs a;
  a.seq_len = T;
  a.num_value_heads = HV;
  a.key_dim = a.value_dim = K;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data();
  a.initial_state = s0.data();
  a.use_qk_l2norm = true;
  for (auto _ : st) {
    reference::GatedDeltaRuleResult r = reference::gated_delta_rule(a);
    benchmark::DoNotOptimize(r.output.data());
  }
  set_counters(st, T, gdr_nominal_flops(T, HV, K, K));
}
BENCHMARK(BM_oracle)
    ->Name("oracle_gdr")
    ->ArgNames({"T", "HV", "K"})
    ->Args({1024, 2, 16})
    ->Args({32768, 2, 16})
    ->Args({131072, 2, 16})
    ->Args({1024, 1, 128})
    ->Args({32768, 1, 128})
    ->Args({32768, 2, 128})
    ->Args({131072, 1, 128})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// prepare_long/case:i: inputs, expectation and baselines of a long case of the full suite.
const char* const kLongCases[] = {
    "gdr(layout=single[131072],H=1,HV=2,K=16,V=16,gate=weak,seed=32003)",
    "gdr(layout=packed[32768,0,100],H=1,HV=2,K=128,V=128,gate=weak,dtype=bf16,seed=32009)",
};

void BM_prepare_long(benchmark::State& st) {
  const cases::Case c = cases::Case::parse(kLongCases[st.range(0)]);
  st.SetLabel(c.id());
  for (auto _ : st) {
    harness::PreparedCase pc = harness::prepare(c);
    benchmark::DoNotOptimize(&pc);
  }
  set_counters(st, c.layout().total_tokens(), 0);
}
BENCHMARK(BM_prepare_long)
    ->Name("prepare_long")
    ->ArgNames({"case"})
    ->DenseRange(0, 1)
    ->Iterations(1)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deltacheck::bench
