// deltacheck bench compare: regressions between two runs of deltacheck_bench (Google Benchmark
// JSON). Exit code 1 when a figure is slower than the threshold allows or errored in a run.
#include "deltacheck/bench.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "tools/deltacheck/commands.h"

namespace deltacheck::cli {
namespace {

struct CompareArgs {
  std::string old_path, new_path;
  double threshold = 0.10;
  bool vs_ceiling = false;
};

BenchRun load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  BenchRun run;
  if (Status st = parse_bench_json(text.str(), &run); !st.ok())
    throw UsageError(path + ": " + st.message());
  return run;
}

int compare(const CompareArgs& a) {
  if (!(a.threshold >= 0)) throw UsageError("--threshold must be >= 0");
  const BenchRun old_run = load(a.old_path), new_run = load(a.new_path);
  const BenchComparison c =
      compare_bench(old_run, new_run, a.threshold,
                    a.vs_ceiling ? BenchMetric::kCeilingFraction : BenchMetric::kTime);
  std::printf("old: %s (%s, %s)\nnew: %s (%s, %s)\ncompared by %s\n", a.old_path.c_str(),
              old_run.host.c_str(), old_run.date.c_str(), a.new_path.c_str(), new_run.host.c_str(),
              new_run.date.c_str(),
              a.vs_ceiling ? "fraction of the ceiling measured in the same run" : "real time");
  std::fputs(format_bench_comparison(c, a.threshold).c_str(), stdout);
  return c.regressions > 0 || !c.errors.empty() ? kExitFail : kExitPass;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "work with deltacheck_bench results");
  cmd->require_subcommand(1);
  CLI::App* c =
      cmd->add_subcommand("compare", "regressions between two deltacheck_bench JSON outputs");
  c->add_option("old", args->old_path, "baseline run (--benchmark_out=old.json)")->required();
  c->add_option("new", args->new_path, "run to judge")->required();
  c->add_option("--threshold", args->threshold,
                "a figure more than this fraction slower is a regression (default 0.10)");
  c->add_flag("--vs-ceiling", args->vs_ceiling,
              "compare each figure's fraction of the ceiling measured in its own run (matmul "
              "for FLOP/s, copy for bytes/s) instead of its time: robust to a busier machine");
  c->footer(R"(example:
  scripts/bench.sh                      # writes reports/latest/bench.json
  cp reports/latest/bench.json old.json # ... change something, rebuild ...
  scripts/bench.sh && deltacheck bench compare old.json reports/latest/bench.json --vs-ceiling
exit codes: 0 no regression, 1 a figure regressed (or errored), 2 usage or input error)");
  return {cmd, [args] { return compare(*args); }};
}

}  // namespace deltacheck::cli
