// The harness's own cost on prefill cases: harness::run_case (poisoned, guarded outputs, the
// backend, integrity checks, comparison per tensor and per sequence) against the bare kernel on
// the same prepared case, plus its parts (allocation, judging) and the per-case preparation
// (inputs, FP64 oracle, fp32 baseline) that every case of a suite pays once.
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"
#include "harness/compare.h"
#include "harness/runner.h"

namespace deltacheck::bench {
namespace {

std::string prefill_case_id(int64_t T, int64_t HV) {
  return "gdr(layout=single[" + std::to_string(T) + "],H=16,HV=" + std::to_string(HV) +
         ",K=128,V=128,dtype=fp32,gate=weak,l2=1,state=rand,cache=prefill,seed=0)";
}

// Preparing a long case runs the FP64 oracle, so each is prepared once per process.
const harness::PreparedCase& prepared(int64_t T, int64_t HV) {
  static std::map<std::string, std::unique_ptr<harness::PreparedCase>> cache;
  const std::string id = prefill_case_id(T, HV);
  auto& slot = cache[id];
  if (!slot)
    slot = std::make_unique<harness::PreparedCase>(harness::prepare(cases::Case::parse(id)));
  return *slot;
}

void BM_prepare(benchmark::State& st) {
  const cases::Case c = cases::Case::parse(prefill_case_id(st.range(0), st.range(1)));
  for (auto _ : st) {
    harness::PreparedCase pc = harness::prepare(c);
    benchmark::DoNotOptimize(pc.expected.size());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

void BM_kernel(benchmark::State& st) {
  const harness::PreparedCase& pc = prepared(st.range(0), st.range(1));
  std::unique_ptr<harness::Backend> cpu = backends::make_backend("cpu");
  cases::TensorMap out = harness::allocate_outputs(pc.outputs);
  for (auto _ : st) {
    const Status s = cpu->run(pc.c, pc.inputs, out);
    if (!s.ok()) st.SkipWithError(s.message().c_str());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

void BM_run_case(benchmark::State& st) {
  const harness::PreparedCase& pc = prepared(st.range(0), st.range(1));
  std::unique_ptr<harness::Backend> cpu = backends::make_backend("cpu");
  double backend = 0.0, total = 0.0;
  for (auto _ : st) {
    const harness::CaseResult r = harness::run_case(pc, *cpu);
    if (r.verdict != harness::Verdict::kPass) st.SkipWithError(r.message.c_str());
    backend += r.seconds_backend;
    total += r.seconds_total;
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
  // The split run_case itself measures: time outside the backend call, relative to it.
  st.counters["outside_backend"] = backend > 0 ? (total - backend) / backend : 0.0;
  // The memory traffic the harness cannot avoid per case (the summary prices it at the read and
  // fill ceilings: the floor): poison written into every output element, then the output and its
  // FP64 expectation read.
  double written = 0.0, read = 0.0;
  for (const harness::OutputSpec& s : pc.outputs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    written += static_cast<double>(n) * static_cast<double>(cases::dtype_size(s.dtype));
    read += static_cast<double>(n) * static_cast<double>(cases::dtype_size(s.dtype) + 8);
  }
  st.counters["poison_bytes"] = written;
  st.counters["compare_bytes"] = read;
}

void BM_allocate(benchmark::State& st) {
  const harness::PreparedCase& pc = prepared(st.range(0), st.range(1));
  for (auto _ : st) {
    cases::TensorMap out = harness::allocate_outputs(pc.outputs);
    benchmark::DoNotOptimize(out.all().front().data());
  }
}

void BM_judge(benchmark::State& st) {
  const harness::PreparedCase& pc = prepared(st.range(0), st.range(1));
  std::unique_ptr<harness::Backend> cpu = backends::make_backend("cpu");
  cases::TensorMap out = harness::allocate_outputs(pc.outputs);
  if (const Status s = cpu->run(pc.c, pc.inputs, out); !s.ok()) st.SkipWithError("kernel failed");
  for (auto _ : st) {
    const harness::CaseResult r = harness::judge(pc, out, "cpu");
    benchmark::DoNotOptimize(r.margin);
  }
}

// One error measurement (harness::measure: rel_rms, max |Δ| and where) of an fp32 tensor against
// its FP64 expectation, one largest |Δ| two thirds in: the step every judged output and sequence
// pays. Bytes processed are the bytes read (4 + 8 per element), to hold against ceiling/read.
void BM_measure(benchmark::State& st) {
  const int64_t n = st.range(0);
  std::vector<double> e(static_cast<size_t>(n));
  cases::Tensor t("o", cases::DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) {
    e[i] = static_cast<double>(i % 97) * 0.01;
    t.set(i, e[i] + static_cast<double>((i * 7919) % 13) * 1e-7);
  }
  t.set(2 * n / 3, e[2 * n / 3] + 0.5);
  for (auto _ : st) {
    const harness::Metrics m = harness::measure(t, e, 0, n);
    benchmark::DoNotOptimize(m.max_index);
  }
  st.SetBytesProcessed(st.iterations() * n * 12);
}
BENCHMARK(BM_measure)
    ->Name("harness_measure/fp32")
    ->ArgName("elements")
    ->Arg(16384)
    ->Arg(131072)
    ->Arg(1 << 20)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void harness_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "HV"})->Args({512, 16})->Args({4096, 16})->Args({16384, 16});
  b->MeasureProcessCPUTime()->UseRealTime()->Unit(benchmark::kMillisecond);
}

// Many tiny sequences: the harness must stay O(sequences) (layouts are copied and parsed once
// per sequence by the probes); a quadratic step shows as a 10x row costing 100x.
void BM_many_sequences(benchmark::State& st) {
  const int64_t n = st.range(0);
  const harness::PreparedCase pc = harness::prepare(cases::Case::parse(
      "gdr(layout=packed[1*" + std::to_string(n) + "],H=1,HV=1,K=4,V=4,dtype=fp32,seed=0)"));
  std::unique_ptr<harness::Backend> cpu = backends::make_backend("cpu");
  for (auto _ : st) {
    const harness::CaseResult r = harness::run_case(pc, *cpu, /*probes=*/true);
    if (r.verdict != harness::Verdict::kPass) st.SkipWithError(r.message.c_str());
  }
  st.SetItemsProcessed(st.iterations() * n);
}

// The smoke suite's gdr cases that the cpu backend runs (issue #20's "per-case overhead"): what the
// harness does per case around the backend's calls, on deltacheck's own cpu backend. Each phase on
// its own (inputs, preparation: inputs + FP64 oracle + baselines), then a whole case with the
// probes, where `outside_ms` is the process CPU time per case outside the backend's calls (all
// threads; CPU time, not wall, because a shared machine's load inflates wall time but not CPU
// time).
const std::vector<cases::Case>& smoke_gdr_cases() {
  static const std::vector<cases::Case> cs = [] {
    std::vector<cases::Case> out;
    const std::unique_ptr<harness::Backend> cpu = backends::make_backend("cpu");
    for (const cases::Case& c : cases::suite("smoke"))
      if (c.op() == "gdr" && cpu->supports(c).ok) out.push_back(c);
    return out;
  }();
  return cs;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The cpu backend, with the process CPU time spent inside its calls counted.
class TimedBackend : public harness::Backend {
 public:
  TimedBackend() : inner_(backends::make_backend("cpu")) {}
  std::string name() const override { return inner_->name(); }
  std::string description() const override { return inner_->description(); }
  harness::Support supports(const cases::Case& c) const override { return inner_->supports(c); }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const double t0 = process_cpu_seconds();
    Status s = inner_->run(c, in, out);
    seconds += process_cpu_seconds() - t0;
    ++calls;
    return s;
  }
  double seconds = 0.0;
  int64_t calls = 0;

 private:
  std::unique_ptr<harness::Backend> inner_;
};

void BM_smoke_generate(benchmark::State& st) {
  for (auto _ : st)
    for (const cases::Case& c : smoke_gdr_cases()) {
      cases::TensorMap in = cases::generate_inputs(c);
      benchmark::DoNotOptimize(in.all().size());
    }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(smoke_gdr_cases().size()));
}

void BM_smoke_prepare(benchmark::State& st) {
  for (auto _ : st)
    for (const cases::Case& c : smoke_gdr_cases()) {
      harness::PreparedCase pc = harness::prepare(c);
      benchmark::DoNotOptimize(pc.expected.size());
    }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(smoke_gdr_cases().size()));
}

// cache:1 runs from a warm expectation cache (harness/expectation_cache.h): a temporary
// directory filled by one untimed pass over the cases, as a rerun of the same cases finds it.
void BM_smoke_case(benchmark::State& st) {
  const bool probes = st.range(0) != 0;
  const bool cached = st.range(1) != 0;
  std::shared_ptr<const harness::ExpectationCache> cache;
  int64_t warm_misses = 0;
  const std::string dir = "/tmp/deltacheck-bench-cache-" + std::to_string(::getpid());
  if (cached) {
    cache = harness::open_expectation_cache(dir);
    TimedBackend warmup;
    for (const cases::Case& c : smoke_gdr_cases())
      (void)harness::run_case(harness::prepare(c, {}, cache), warmup, probes);
    warm_misses = cache->stats().misses;
  }
  TimedBackend cpu;
  double cpu_total = 0.0;
  int64_t n = 0;
  for (auto _ : st) {
    const double t0 = process_cpu_seconds();
    for (const cases::Case& c : smoke_gdr_cases()) {
      const harness::CaseResult r = harness::run_case(harness::prepare(c, {}, cache), cpu, probes);
      if (r.verdict != harness::Verdict::kPass) st.SkipWithError(r.message.c_str());
      ++n;
    }
    cpu_total += process_cpu_seconds() - t0;
  }
  st.SetItemsProcessed(n);
  const double per_case = n > 0 ? 1e3 / static_cast<double>(n) : 0.0;
  st.counters["outside_ms"] = (cpu_total - cpu.seconds) * per_case;
  st.counters["backend_ms"] = cpu.seconds * per_case;
  st.counters["calls"] = n > 0 ? static_cast<double>(cpu.calls) / static_cast<double>(n) : 0.0;
  if (cached) {
    const harness::ExpectationCache::Stats cs = cache->stats();
    st.counters["cache_misses_timed"] = static_cast<double>(cs.misses - warm_misses);
    st.counters["cache_not_stored"] = static_cast<double>(cs.not_worth + cs.full);
    std::filesystem::remove_all(dir);
  }
}

BENCHMARK(BM_smoke_generate)
    ->Name("harness_smoke/generate")
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_smoke_prepare)
    ->Name("harness_smoke/prepare")
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_smoke_case)
    ->Name("harness_smoke/case")
    ->ArgNames({"probes", "cache"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_many_sequences)
    ->Name("harness_sequences/run_case_with_probes")
    ->ArgName("seqs")
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prepare)->Name("harness_prefill/prepare")->Apply(harness_shapes)->Iterations(1);
BENCHMARK(BM_kernel)->Name("harness_prefill/kernel")->Apply(harness_shapes);
BENCHMARK(BM_run_case)->Name("harness_prefill/run_case")->Apply(harness_shapes);
BENCHMARK(BM_allocate)->Name("harness_prefill/allocate")->Apply(harness_shapes);
BENCHMARK(BM_judge)->Name("harness_prefill/judge")->Apply(harness_shapes);

}  // namespace
}  // namespace deltacheck::bench
