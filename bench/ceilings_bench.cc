// The machine's own ceilings, measured in the same run as the kernels they judge: an fp32 matrix
// product through LibTorch (OpenBLAS, all cores) for compute-bound figures and a large memory
// copy on all cores for memory-bound ones. Summary lines divide each figure by one of these.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cpu/parallel_for.h"

#ifdef DELTACHECK_BENCH_TORCH
#include <ATen/ATen.h>
#endif

namespace deltacheck::bench {
namespace {

// Copy of a buffer far larger than the last-level cache, split over every hardware thread the
// kernels use; bytes/s counts what is read plus what is written, as the decode figure does.
void BM_ceiling_copy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0)) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched here: no page faults while timed
  const int threads = kernels::cpu::resolve_threads(0);
  const int64_t pieces = 4 * threads;
  const size_t piece = bytes / static_cast<size_t>(pieces);
  for (auto _ : st) {
    kernels::cpu::parallel_for(pieces, threads, [&](int64_t i) {
      std::memcpy(dst.data() + i * piece, src.data() + i * piece, piece);
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(2.0 * static_cast<double>(piece * pieces)) *
                       static_cast<int64_t>(st.iterations()));
  st.counters["threads"] = threads;
}

BENCHMARK(BM_ceiling_copy)
    ->Name("ceiling/copy")
    ->ArgNames({"MiB"})
    ->Arg(256)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#ifdef DELTACHECK_BENCH_TORCH
// Square fp32 matrix product through at::mm (OpenBLAS sgemm with its own threads: all cores).
void BM_ceiling_matmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  const at::Tensor a = at::rand({n, n}, at::kFloat), b = at::rand({n, n}, at::kFloat);
  at::Tensor c = at::empty({n, n}, at::kFloat);
  for (auto _ : st) {
    at::mm_out(c, a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * n * static_cast<double>(st.iterations()),
                                             benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ceiling_matmul)
    ->Name("ceiling/matmul_fp32")
    ->ArgNames({"n"})
    ->Arg(2048)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif

}  // namespace
}  // namespace deltacheck::bench
