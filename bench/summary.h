// The one-line-per-figure summary of a benchmark run: each figure as a fraction of the ceiling
// measured in the same run (nominal FLOP/s against the fp32 matrix product, bytes/s against the
// memory copy), CPU figures as a speed ratio to the LibTorch figure of the same shape, and the
// harness as its overhead over the bare kernel.
#pragma once

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

namespace deltacheck::bench {

// What the summary needs of one benchmark run.
struct Figure {
  std::string name;      // benchmark name, "/real_time" and the like included
  double seconds = 0.0;  // real time per iteration
  double flops = 0.0;    // nominal FLOP/s counter, 0 if none
  double bytes = 0.0;    // bytes/s, 0 if none
  double items = 0.0;    // tokens (items)/s, 0 if none
  double poison_bytes = 0.0, compare_bytes = 0.0;  // harness_prefill/run_case: its traffic
  std::string error;                               // set when the benchmark reported an error
};

// The summary text, one line per figure.
std::string summarize(const std::vector<Figure>& figures);

// A display reporter that forwards to another (console or JSON) and keeps every figure.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CollectingReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;
  const std::vector<Figure>& figures() const { return figures_; }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::vector<Figure> figures_;
};

}  // namespace deltacheck::bench
