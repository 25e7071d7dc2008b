// The LibTorch backends against the cpu backend through the Backend interface, on the benchmark
// shapes: inputs from the case generator, outputs into the runner's guarded buffers, so a figure
// is what `deltacheck run --backend cpu,torch` spends per case in the backend (conversions to
// and from ATen tensors included). Names "<figure>/<backend>/<shape>" pair cpu with torch in the
// summary; torch-op calls the example operator library (examples/torch_op), the CPU kernel behind
// the dispatcher.
#ifdef DELTACHECK_BENCH_TORCH_BACKEND
#include <benchmark/benchmark.h>

#include <string>

#include "backends/torch/torch_backend.h"
#include "bench/bench_util.h"
#include "cases/case.h"
#include "cases/generate.h"
#include "harness/backend.h"
#include "harness/op_names.h"
#include "harness/runner.h"

namespace deltacheck::bench {
namespace {

// T = 4096 tokens in one sequence with a state in and out; 256 packed sequences of 16 tokens from
// zero states. H = HV = 16, K = V = 128, fp32.
constexpr const char* kPrefill =
    "gdr(layout=single[4096],H=16,HV=16,K=128,V=128,dtype=fp32,state=rand,cache=prefill)";
constexpr const char* kShort =
    "gdr(layout=packed[16*256],H=16,HV=16,K=128,V=128,dtype=fp32,state=none,cache=prefill)";

void BM_backend(benchmark::State& st, const std::string& backend, const std::string& case_id) {
  backends::register_torch_backends();
  harness::BackendOptions options;
  options.library = DELTACHECK_EXAMPLE_OP;
  options.op = "deltacheck_example::chunk_gated_delta_rule";
  auto b = backends::make_backend(backend, options);
  const cases::Case c = cases::Case::parse(case_id);
  const cases::TensorMap in = cases::generate_inputs(c);
  cases::TensorMap out = harness::allocate_outputs(harness::operation_for(c).outputs(c));
  for (auto _ : st) {
    const Status s = b->run(c, in, out);
    if (!s.ok()) {
      st.SkipWithError(s.message().c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  const int64_t tokens = c.layout().row_length();
  set_counters(st, tokens, gdr_nominal_flops(tokens, 16, 128, 128));
}

#define DELTACHECK_BACKEND_BENCH(backend, tag)                    \
  BENCHMARK_CAPTURE(BM_backend, prefill_##tag, backend, kPrefill) \
      ->Name("gdr_backend_prefill/" backend "/T:4096")            \
      ->UseRealTime()                                             \
      ->Unit(benchmark::kMillisecond);                            \
  BENCHMARK_CAPTURE(BM_backend, short_##tag, backend, kShort)     \
      ->Name("gdr_backend_short/" backend "/N:256/L:16")          \
      ->UseRealTime()                                             \
      ->Unit(benchmark::kMillisecond)

DELTACHECK_BACKEND_BENCH("cpu", cpu);
DELTACHECK_BACKEND_BENCH("torch", torch);
DELTACHECK_BACKEND_BENCH("torch-op", torch_op);

}  // namespace
}  // namespace deltacheck::bench
#endif  // DELTACHECK_BENCH_TORCH_BACKEND
