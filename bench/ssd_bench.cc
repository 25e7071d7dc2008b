// Mamba2 SSD forward on the CPU: the chunked kernel (kernels/cpu/ssd.h) at T = 4096, H = 64,
// P = 64, N = 128, G = 8 fp32 (issue 39's shape), and the one-token state update of 64 sequences.
// FLOP/s counts the recurrence's nominal 4 T H P N (the state update and the read-out, P x N
// each per token and head), so the summary holds it against the same run's matmul ceiling.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/ssd.h"

namespace deltacheck::bench {
namespace {

constexpr int64_t kH = 64, kP = 64, kN = 128, kG = 8;

struct SsdInputs {
  std::vector<float> x, dt, B, C, A, dt_bias, D, y, state;
  kernels::SsdParams p;
  SsdInputs(int64_t seqs, int64_t T)
      : x(uniform(seqs * T * kH * kP, -1.0f, 1.0f, 11)),
        dt(uniform(seqs * T * kH, -1.0f, 1.0f, 12)),
        B(uniform(seqs * T * kG * kN, -1.0f, 1.0f, 13)),
        C(uniform(seqs * T * kG * kN, -1.0f, 1.0f, 14)),
        A(uniform(kH, -16.0f, -1.0f, 15)),
        dt_bias(uniform(kH, -6.0f, -2.0f, 16)),
        D(uniform(kH, 0.5f, 1.5f, 17)),
        y(static_cast<size_t>(seqs * T * kH * kP)),
        state(uniform(seqs * kH * kP * kN, -0.1f, 0.1f, 18)) {
    p.batch = seqs;
    p.seq_len = T;
    p.num_heads = kH;
    p.head_dim = kP;
    p.num_groups = kG;
    p.state_dim = kN;
    p.x = x.data();
    p.dt = dt.data();
    p.B = B.data();
    p.C = C.data();
    p.A = A.data();
    p.dt_bias = dt_bias.data();
    p.D = D.data();
    p.y = y.data();
    p.initial_state = state.data();
    p.final_state = state.data();  // in place, as a chunked prefill carries it
  }
};

double ssd_nominal_flops(int64_t tokens) {
  return 4.0 * static_cast<double>(tokens) * kH * kP * kN;
}

void BM_ssd_prefill_cpu(benchmark::State& st) {
  const int64_t T = st.range(0);
  SsdInputs in(1, T);
  for (auto _ : st) {
    if (Status s = kernels::cpu::chunked_ssd(in.p); !s.ok()) st.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(in.y.data());
  }
  set_counters(st, T, ssd_nominal_flops(T));
}

void BM_ssd_decode_cpu(benchmark::State& st) {
  const int64_t seqs = st.range(0);
  SsdInputs in(seqs, 1);
  for (auto _ : st) {
    if (Status s = kernels::cpu::ssd_state_update(in.p); !s.ok())
      st.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(in.y.data());
  }
  set_counters(st, seqs, ssd_nominal_flops(seqs));
}

BENCHMARK(BM_ssd_prefill_cpu)
    ->Name("ssd_prefill/cpu")
    ->ArgNames({"T"})
    ->Arg(4096)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ssd_decode_cpu)
    ->Name("ssd_decode/cpu")
    ->ArgNames({"seqs"})
    ->Arg(64)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deltacheck::bench
