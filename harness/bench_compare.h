// Regression tracking for the benchmark binary: reads two Google Benchmark JSON outputs
// (deltacheck_bench --benchmark_out=F --benchmark_out_format=json) and compares them figure by
// figure, either by time or by each figure's fraction of the machine ceiling measured in its own
// run (robust to a slower or busier machine: both the figure and its ceiling move).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace deltacheck::harness {

struct BenchFigure {
  std::string name;      // run name (aggregates: the benchmark they summarize)
  double seconds = 0.0;  // real time per iteration (median over repetitions when present)
  double flops = 0.0;    // the nominal "FLOP/s" counter, 0 if none
  double bytes = 0.0;    // bytes_per_second, 0 if none
  bool error = false;    // the benchmark reported an error
};

struct BenchRun {
  std::vector<BenchFigure> figures;  // in the order of the file
  std::string host;                  // context.host_name
  std::string date;                  // context.date
};

// Parses the JSON text; InvalidArgument with a one-line reason when it is not benchmark output.
Status parse_bench_json(const std::string& text, BenchRun* out);

enum class BenchMetric {
  kTime,             // real time per iteration (lower is better)
  kCeilingFraction,  // FLOP/s / matmul ceiling, bytes/s / copy ceiling; time where neither applies
};

struct BenchDelta {
  std::string name;
  double old_value = 0.0, new_value = 0.0;  // seconds, or fractions of the ceiling
  const char* unit = "s";                   // "s", "of matmul", "of copy"
  double slowdown = 0.0;                    // > 0: new is slower (0.25 = 25% slower)
  bool regression = false;                  // slowdown > threshold
};

struct BenchComparison {
  std::vector<BenchDelta> rows;  // figures in both runs, in the new run's order
  std::vector<std::string> only_old, only_new, errors;
  int regressions = 0;
};

BenchComparison compare_bench(const BenchRun& old_run, const BenchRun& new_run, double threshold,
                              BenchMetric metric);

// The comparison as a table, one line per figure, and a closing line.
std::string format_bench_comparison(const BenchComparison& c, double threshold);

}  // namespace deltacheck::harness
