// deltacheck_bench: speed of the project's kernels and of the harness, with the machine's ceilings
// measured in the same run, then a one-line summary per figure as a fraction of its ceiling.
// Google Benchmark's own flags all apply; scripts/bench.sh runs it with JSON output into
// reports/latest/.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "bench/summary.h"

#ifdef DELTACHECK_BENCH_TORCH
#include <ATen/Parallel.h>
#endif

namespace {

void print_help() {
  std::printf(R"(deltacheck_bench: speed of deltacheck's kernels and harness against this machine's
ceilings (an fp32 matrix product through LibTorch/OpenBLAS and a large memory copy), measured in
the same run. After the figures, a summary prints each one as a fraction of its ceiling, CPU
kernels as a speed ratio to the LibTorch kernels, and the harness as its overhead.

examples:
  deltacheck_bench                                        every figure (a few minutes)
  deltacheck_bench --benchmark_filter='ceiling|T:4096'    the ceilings and the T = 4096 shapes
  deltacheck_bench --benchmark_out=bench.json --benchmark_out_format=json
  deltacheck bench compare old.json new.json              regressions between two runs

Google Benchmark flags:
)");
  benchmark::PrintDefaultHelp();
}

// The 1-minute load average: on a shared machine every figure is only as good as the quiet it was
// measured in, so the summary says how busy the machine was.
std::string load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "unknown";
  char buf[64] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "unknown";
  std::string s(buf);
  return s.substr(0, s.find(' '));
}

// The display format Google Benchmark would have chosen, so the collecting reporter can forward to
// it (passing our own display reporter makes the library ignore --benchmark_format).
std::string display_format(int argc, char** argv) {
  std::string format = "console";
  for (int i = 1; i < argc; ++i) {
    const char* flag = "--benchmark_format=";
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) format = argv[i] + std::strlen(flag);
  }
  return format;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace deltacheck::bench;
  const std::string format = display_format(argc, argv);
  if (format != "console" && format != "json") {
    std::fprintf(stderr, "deltacheck_bench: error: --benchmark_format=%s (console or json)\n",
                 format.c_str());
    return 2;
  }
  benchmark::Initialize(&argc, argv, print_help);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  const std::string load_before = load_average();
  benchmark::AddCustomContext("load_average_at_start", load_before);
  benchmark::AddCustomContext("deltacheck_kernel_threads",
                              std::to_string(std::thread::hardware_concurrency()));
#ifdef DELTACHECK_BENCH_TORCH
  benchmark::AddCustomContext("torch_intraop_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("matmul_ceiling", "at::mm fp32 (LibTorch, OpenBLAS)");
#else
  benchmark::AddCustomContext("matmul_ceiling", "none (built without LibTorch)");
#endif

  std::unique_ptr<benchmark::BenchmarkReporter> inner;
  if (format == "json") {
    inner = std::make_unique<benchmark::JSONReporter>();
  } else {
    inner = std::make_unique<benchmark::ConsoleReporter>(isatty(STDOUT_FILENO)
                                                             ? benchmark::ConsoleReporter::OO_Color
                                                             : benchmark::ConsoleReporter::OO_None);
  }
  CollectingReporter reporter(std::move(inner));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  // The summary goes to stdout after a console display, to stderr when stdout carries JSON / CSV.
  const std::string summary =
      summarize(reporter.figures()) + "  load average (1 min): " + load_before + " at start, " +
      load_average() + " at the end, on " + std::to_string(std::thread::hardware_concurrency()) +
      " hardware threads\n";
  std::fputs(("\n" + summary).c_str(), format == "console" ? stdout : stderr);
  for (const Figure& f : reporter.figures())
    if (!f.error.empty()) return 1;
  return 0;
}
