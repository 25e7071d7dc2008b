// deltacheck bench compare: parsing Google Benchmark JSON (units, repetitions, aggregates,
// errors) and judging regressions by time and by fraction of the ceiling of the same run.
#include <gtest/gtest.h>

#include <string>

#include "harness/bench_compare.h"

namespace deltacheck::harness {
namespace {

// A Google Benchmark JSON document with the given entries.
std::string doc(const std::string& entries) {
  return R"({"context": {"host_name": "h", "date": "d"}, "benchmarks": [)" + entries + "]}";
}

std::string entry(const std::string& name, double time, const std::string& unit,
                  const std::string& extra = "") {
  return R"({"name": ")" + name + R"(", "run_name": ")" + name +
         R"(", "run_type": "iteration", "iterations": 3, "real_time": )" + std::to_string(time) +
         R"(, "cpu_time": 1, "time_unit": ")" + unit + "\"" + extra + "}";
}

BenchRun parse(const std::string& text) {
  BenchRun r;
  const Status st = parse_bench_json(text, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

TEST(BenchCompare, ParsesUnitsAndCounters) {
  const BenchRun r = parse(doc(entry("a", 2, "ms", R"(, "FLOP/s": 5e9)") + "," +
                               entry("b", 3, "us", R"(, "bytes_per_second": 7e9)")));
  ASSERT_EQ(r.figures.size(), 2u);
  EXPECT_DOUBLE_EQ(r.figures[0].seconds, 2e-3);
  EXPECT_DOUBLE_EQ(r.figures[0].flops, 5e9);
  EXPECT_DOUBLE_EQ(r.figures[1].seconds, 3e-6);
  EXPECT_DOUBLE_EQ(r.figures[1].bytes, 7e9);
  EXPECT_EQ(r.host, "h");
}

TEST(BenchCompare, RepetitionsReduceToTheirMedian) {
  const std::string agg =
      R"({"name": "a_median", "run_name": "a", "run_type": "aggregate", "aggregate_name": "median",
          "iterations": 3, "real_time": 5, "time_unit": "ms"})";
  const BenchRun with_agg = parse(doc(entry("a", 1, "ms") + "," + entry("a", 9, "ms") + "," + agg));
  ASSERT_EQ(with_agg.figures.size(), 1u);
  EXPECT_DOUBLE_EQ(with_agg.figures[0].seconds, 5e-3);
  const BenchRun plain =
      parse(doc(entry("a", 1, "ms") + "," + entry("a", 9, "ms") + "," + entry("a", 4, "ms")));
  EXPECT_DOUBLE_EQ(plain.figures[0].seconds, 4e-3);
}

TEST(BenchCompare, RejectsWhatIsNotBenchmarkOutput) {
  BenchRun r;
  EXPECT_FALSE(parse_bench_json("{not json", &r).ok());
  EXPECT_FALSE(parse_bench_json(R"({"results": []})", &r).ok());
  EXPECT_FALSE(parse_bench_json(doc(entry("a", 1, "weeks")), &r).ok());
}

TEST(BenchCompare, FlagsASlowerFigureAndNotAFasterOne) {
  const BenchRun old_run = parse(
      doc(entry("slow", 10, "ms") + "," + entry("fast", 10, "ms") + "," + entry("gone", 1, "ms")));
  const BenchRun new_run = parse(
      doc(entry("slow", 12, "ms") + "," + entry("fast", 8, "ms") + "," + entry("added", 1, "ms")));
  const BenchComparison c = compare_bench(old_run, new_run, 0.10, BenchMetric::kTime);
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_TRUE(c.rows[0].regression);
  EXPECT_NEAR(c.rows[0].slowdown, 0.2, 1e-12);
  EXPECT_FALSE(c.rows[1].regression);
  EXPECT_EQ(c.regressions, 1);
  EXPECT_EQ(c.only_old, std::vector<std::string>{"gone"});
  EXPECT_EQ(c.only_new, std::vector<std::string>{"added"});
  EXPECT_NE(format_bench_comparison(c, 0.10).find("REGRESSION"), std::string::npos);
  // Within the threshold: no regression.
  EXPECT_EQ(compare_bench(old_run, new_run, 0.25, BenchMetric::kTime).regressions, 0);
}

TEST(BenchCompare, CeilingFractionForgivesASlowerMachine) {
  // Everything twice as slow, the ceiling too: by time a regression, by fraction of the ceiling
  // none; a kernel that lost ground against its ceiling is one either way.
  auto run = [](double matmul_flops, double kernel_flops, double kernel_ms) {
    return doc(entry("ceiling/matmul_fp32/n:2048", 1e13 / matmul_flops, "ms",
                     R"(, "FLOP/s": )" + std::to_string(matmul_flops)) +
               "," +
               entry("gdr_prefill/cpu", kernel_ms, "ms",
                     R"(, "FLOP/s": )" + std::to_string(kernel_flops)));
  };
  const BenchRun old_run = parse(run(100e9, 40e9, 10));
  const BenchRun slower_machine = parse(run(50e9, 20e9, 20));
  EXPECT_EQ(compare_bench(old_run, slower_machine, 0.1, BenchMetric::kTime).regressions, 2);
  const BenchComparison c =
      compare_bench(old_run, slower_machine, 0.1, BenchMetric::kCeilingFraction);
  EXPECT_EQ(c.regressions, 0);
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_STREQ(c.rows[1].unit, "of matmul");
  EXPECT_DOUBLE_EQ(c.rows[1].new_value, 0.4);
  const BenchRun worse_kernel = parse(run(100e9, 30e9, 13.3));
  EXPECT_EQ(compare_bench(old_run, worse_kernel, 0.1, BenchMetric::kCeilingFraction).regressions,
            1);
}

TEST(BenchCompare, AnErroredFigureIsReported) {
  const BenchRun old_run = parse(doc(entry("a", 1, "ms")));
  const BenchRun new_run = parse(doc(R"({"name": "a", "run_name": "a", "run_type": "iteration",
      "error_occurred": true, "error_message": "kernel failed"})"));
  const BenchComparison c = compare_bench(old_run, new_run, 0.1, BenchMetric::kTime);
  EXPECT_EQ(c.errors, std::vector<std::string>{"a"});
  EXPECT_TRUE(c.rows.empty());
}

}  // namespace
}  // namespace deltacheck::harness
