// Benchmark comparison: regressions between two runs of deltacheck_bench (Google Benchmark JSON),
// what `deltacheck bench compare` prints (docs/performance.md).
#pragma once

#include "harness/bench_compare.h"

namespace deltacheck {

// One run's figures, host and date: parse_bench_json(text, &run) (InvalidArgument naming what
// is wrong).
using BenchRun = harness::BenchRun;
using harness::parse_bench_json;
// What is compared: kTime (real time) or kCeilingFraction (each figure's fraction of the ceiling
// measured in its own run; robust to a busier machine).
using BenchMetric = harness::BenchMetric;
// compare_bench(old, new, threshold, metric): a figure more than `threshold` (a fraction) slower
// is a regression; BenchComparison counts them and lists figures that errored.
using BenchComparison = harness::BenchComparison;
using harness::compare_bench;
// The comparison as a table with a final line.
using harness::format_bench_comparison;

}  // namespace deltacheck
