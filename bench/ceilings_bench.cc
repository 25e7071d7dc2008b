// The machine's own ceilings, measured in the same run as the kernels they judge: an fp32 matrix
// product through LibTorch (OpenBLAS, all cores) for compute-bound figures and a large memory
// copy on all cores for memory-bound ones; a large read and a large fill on all cores price the
// harness's own memory traffic (its floor). Summary lines divide each figure by one of these.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "bench/bench_util.h"
#include "core/parallel_for.h"

#ifdef DELTACHECK_BENCH_TORCH
#include <ATen/ATen.h>
#endif

namespace deltacheck::bench {
namespace {

// Pieces of a buffer far larger than the last-level cache, spread over every hardware thread.
struct Pieces {
  int threads = core::resolve_threads(0);
  int64_t count = 4 * static_cast<int64_t>(threads);
  size_t bytes;  // of one piece
  explicit Pieces(size_t total) : bytes(total / static_cast<size_t>(4 * threads) / 64 * 64) {}
  size_t total() const { return bytes * static_cast<size_t>(count); }
};

// The ceilings' common registration: 256 MiB, wall time, every thread's CPU time.
void ceiling_shape(benchmark::internal::Benchmark* b) {
  b->ArgNames({"MiB"})->Arg(256)->MeasureProcessCPUTime()->UseRealTime()->Unit(
      benchmark::kMillisecond);
}

// Copy; bytes/s counts what is read plus what is written, as the decode figure does.
void BM_ceiling_copy(benchmark::State& st) {
  const Pieces pieces(static_cast<size_t>(st.range(0)) << 20);
  std::vector<char> src(pieces.total(), 1), dst(pieces.total(), 0);  // no page faults while timed
  for (auto _ : st) {
    core::parallel_for(pieces.count, pieces.threads, [&](int64_t i) {
      const size_t at = static_cast<size_t>(i) * pieces.bytes;
      std::memcpy(dst.data() + at, src.data() + at, pieces.bytes);
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(2 * static_cast<int64_t>(pieces.total()) * st.iterations());
  st.counters["threads"] = pieces.threads;
}
BENCHMARK(BM_ceiling_copy)->Name("ceiling/copy")->Apply(ceiling_shape);

// Reading with eight independent sums per thread (the additions never bound it): the rate at which
// a comparison can stream an output and its expectation.
void BM_ceiling_read(benchmark::State& st) {
  const Pieces pieces(static_cast<size_t>(st.range(0)) << 20);
  std::vector<uint64_t> src(pieces.total() / sizeof(uint64_t), 1);
  std::vector<uint64_t> sums(static_cast<size_t>(pieces.count));
  const size_t words = pieces.bytes / sizeof(uint64_t);
  for (auto _ : st) {
    core::parallel_for(pieces.count, pieces.threads, [&](int64_t i) {
      const uint64_t* p = src.data() + static_cast<size_t>(i) * words;
      uint64_t acc[8] = {};
      for (size_t j = 0; j + 8 <= words; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += p[j + l];
      sums[i] = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
    });
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(pieces.total()) * st.iterations());
}
BENCHMARK(BM_ceiling_read)->Name("ceiling/read")->Apply(ceiling_shape);

// Filling (memset, which streams a large fill past the caches): the rate at which outputs can be
// poisoned.
void BM_ceiling_fill(benchmark::State& st) {
  const Pieces pieces(static_cast<size_t>(st.range(0)) << 20);
  std::vector<char> dst(pieces.total(), 0);  // touched here: no page faults while timed
  int value = 0;
  for (auto _ : st) {
    ++value;
    core::parallel_for(pieces.count, pieces.threads, [&](int64_t i) {
      std::memset(dst.data() + static_cast<size_t>(i) * pieces.bytes, value & 0xff, pieces.bytes);
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(pieces.total()) * st.iterations());
}
BENCHMARK(BM_ceiling_fill)->Name("ceiling/fill")->Apply(ceiling_shape);

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
