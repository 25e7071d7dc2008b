// Mask construction speed: the CPU builder (kernels/cpu/mask_builder, key intervals per query row,
// filled with memset runs) against the LibTorch builder (kernels/torch/mask_builder, broadcast
// index comparisons as Python frameworks build masks), same problems, boolean [B, 1, q, kv]
// output. Counters: mask elements/s as items, bytes written/s.
//   mask/cpu/<shape>    mask/torch/<shape>
// Shapes: prefill (q = kv, causal + left padding + packed position ids), a sliding window of
// 1024, and a static-cache decode step (B = 8, q = 1, kv = max_cache_len).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/mask_builder.h"

#ifdef DELTACHECK_BENCH_TORCH
#include "kernels/torch/mask_builder.h"
#endif

namespace deltacheck::bench {
namespace {

enum Shape : int64_t { kPrefillPacked = 0, kWindow = 1, kStaticDecode = 2 };

// The inputs of one benchmark problem; the builders' params point into it.
struct MaskProblem {
  int64_t batch = 1, q_len = 0, kv_length = 0, q_offset = 0, window = 0;
  bool static_cache = false;
  std::vector<uint8_t> padding;    // [B, kv]
  std::vector<int64_t> positions;  // [1, B, q], empty: no packing

  MaskProblem(Shape shape, int64_t n) {
    if (shape == kStaticDecode) {
      batch = 8;
      q_len = 1;
      kv_length = n;
      q_offset = n / 2;
      static_cache = true;
    } else {
      q_len = kv_length = n;
      window = shape == kWindow ? 1024 : 0;
    }
    padding.assign(static_cast<size_t>(batch * kv_length), 1);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < 7 * (b + 1); ++j) padding[static_cast<size_t>(b * kv_length + j)] = 0;
    if (shape == kPrefillPacked) {
      // Segments of 1000 tokens, each restarting at position 0.
      for (int64_t t = 0; t < q_len; ++t) positions.push_back(t % 1000);
    }
  }

  template <typename Params>
  Params params() const {
    Params p;
    p.batch = batch;
    p.q_len = q_len;
    p.kv_length = kv_length;
    p.q_offset = q_offset;
    p.sliding_window = window;
    p.padding_mask = padding.data();
    p.position_ids = positions.empty() ? nullptr : positions.data();
    p.static_cache = static_cache;
    return p;
  }
  int64_t elements() const { return batch * q_len * kv_length; }
};

template <typename Params, typename Build>
void run(benchmark::State& st, Build build) {
  const MaskProblem m(static_cast<Shape>(st.range(0)), st.range(1));
  const Params p = m.params<Params>();
  std::vector<uint8_t> out(static_cast<size_t>(m.elements()));
  for (auto _ : st) {
    if (!build(p, out.data()).ok()) st.SkipWithError("mask builder failed");
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations()) * m.elements());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * m.elements());
}

void BM_mask_cpu(benchmark::State& st) {
  run<kernels::MaskParams>(st, [](const kernels::MaskParams& p, uint8_t* out) {
    return kernels::cpu::build_bool_mask(p, out);
  });
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "n"});
  for (int64_t n : {2048, 8192}) b->Args({kPrefillPacked, n});
  b->Args({kWindow, 8192});
  b->Args({kStaticDecode, 8192});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_mask_cpu)->Name("mask/cpu")->Apply(shapes);

#ifdef DELTACHECK_BENCH_TORCH
void BM_mask_torch(benchmark::State& st) {
  run<kernels::MaskParams>(st, [](const kernels::MaskParams& p, uint8_t* out) {
    return kernels::torch::build_bool_mask(p, out);
  });
}
BENCHMARK(BM_mask_torch)->Name("mask/torch")->Apply(shapes);
#endif

}  // namespace
}  // namespace deltacheck::bench
