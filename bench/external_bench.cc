// The external backend's cost per call (issue 20): one process per call (`--cmd`) against one
// worker answering every call (`--serve`), with the same program on the same case in the same
// run: deltacheck_serve_worker (backends/external/serve_worker.cc), which reads {in},
// runs deltacheck's cpu backend and writes {out}. `external_call/kernel` is that backend called
// in-process, so figure - kernel is everything the external route adds per call: {in} written,
// the program reached (started, or sent a request line), its HDF5 read and write, {out} checked
// and read in a child process. The summary prints it as "per-call overhead"; the counter
// cpu_ms_all_processes is the CPU time per call of every process involved.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <memory>
#include <string>

#include "backends/registry.h"
#include "cases/case.h"
#include "harness/runner.h"

namespace deltacheck::bench {
namespace {

// A smoke-suite-sized packed case, and a tiny one (where the route is everything).
const char* kCases[] = {
    "gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,seed=10)",
    "gdr(layout=packed[6,0,9],H=1,HV=2,K=8,V=8,dtype=bf16,seed=2)",
};

const harness::PreparedCase& prepared(int64_t which) {
  static std::unique_ptr<harness::PreparedCase> cache[2];
  if (!cache[which])
    cache[which] = std::make_unique<harness::PreparedCase>(
        harness::prepare(cases::Case::parse(kCases[which])));
  return *cache[which];
}

double cpu_seconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Calls of one backend on one case. Besides the wall time per call, the CPU time per call of
// every process involved (this one, the programs, their guards, the {out} readers: all children
// are waited for by the end, the backend destroyed with its worker), which a busy machine does
// not inflate as it does the wall time.
void run_calls(benchmark::State& st, const std::string& name, const harness::BackendOptions& o) {
  const harness::PreparedCase& pc = prepared(st.range(0));
  cases::TensorMap out = harness::allocate_outputs(pc.outputs);
  const double cpu0 = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN);
  {
    std::unique_ptr<harness::Backend> b = backends::make_backend(name, o);
    // The first call starts the worker (serve): not part of the per-call wall time.
    if (const Status s = b->run(pc.c, pc.inputs, out); !s.ok()) {
      st.SkipWithError(s.message().c_str());
      return;
    }
    for (auto _ : st) {
      const Status s = b->run(pc.c, pc.inputs, out);
      if (!s.ok()) st.SkipWithError(s.message().c_str());
    }
  }
  const double cpu = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN) - cpu0;
  st.counters["cpu_ms_all_processes"] = 1e3 * cpu / static_cast<double>(st.iterations() + 1);
}

void BM_kernel(benchmark::State& st) { run_calls(st, "cpu", {}); }

void BM_cmd(benchmark::State& st) {
  harness::BackendOptions o;
  o.cmd = std::string(DELTACHECK_SERVE_WORKER) + " {in} {out}";
  run_calls(st, "external", o);
}

void BM_serve(benchmark::State& st) {
  harness::BackendOptions o;
  o.serve = DELTACHECK_SERVE_WORKER;
  run_calls(st, "external", o);
}

void external_shapes(benchmark::internal::Benchmark* b) {
  b->ArgName("case")->Arg(0)->Arg(1)->UseRealTime()->MinTime(2.0)->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_kernel)->Name("external_call/kernel")->Apply(external_shapes);
BENCHMARK(BM_cmd)->Name("external_call/cmd")->Apply(external_shapes);
BENCHMARK(BM_serve)->Name("external_call/serve")->Apply(external_shapes);

}  // namespace
}  // namespace deltacheck::bench
