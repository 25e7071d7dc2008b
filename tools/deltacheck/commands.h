// The tool's subcommands, one file each (run.cc, list.cc, ...). A command adds its options to the
// app and returns what to run when it was the one parsed. Shared here: exit codes, the usage
// error, and case selection (--suite, --case, --filter, --seed).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "deltacheck/backend.h"
#include "deltacheck/case.h"
#include "deltacheck/report.h"
#include "deltacheck/result.h"
#include "deltacheck/runner.h"

namespace deltacheck::cli {

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2;

// Bad input from the user: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

struct Selection {
  std::string suite = "smoke";
  std::vector<std::string> case_ids;
  std::string filter;
  std::vector<std::string> excludes;  // --exclude, repeatable
  int64_t seed = -1;
  std::string shard;  // --shard I/N; else GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS when both set
};
void add_selection_options(CLI::App* app, Selection& s);
// The selected cases (cases/selection.h); throws UsageError on unknown suites, bad ids, regexes.
std::vector<Case> select_cases(const Selection& s);
// The selection with its sharding: case i of the full selection belongs to shard i % N.
struct SelectedCases {
  std::vector<Case> cases;       // this shard's cases
  std::vector<int64_t> indices;  // each one's position in the unsharded selection
  int64_t total = 0;             // cases selected before sharding
  int shard_index = 0, shard_count = 1;
};
SelectedCases select_sharded(const Selection& s);
// --filter compiled (RE2); throws UsageError on a bad pattern.
IdFilter make_id_filter(const std::string& filter);
// "a,b" "c" -> {a, b, c}
std::vector<std::string> split_commas(const std::vector<std::string>& items);

// How results are shown and judged (--quiet, --report-dir, --fail-on): shared by every
// command that runs cases (run, golden verify).
struct OutputOptions {
  bool quiet = false;
  std::string report_dir;  // report.json, junit.xml, summary.md, report.html, failures/
  std::vector<std::string> fail_on{"fail", "leak", "error"};  // verdicts that fail the gate
  std::string progress = "auto";  // auto (a bar on a terminal), bar, lines
  int max_dumps = 20;             // failure dumps written at most (HDF5 files can be large)
};
void add_output_options(CLI::App* app, OutputOptions& o);
// "job summary: appended to PATH", or a warning on stderr when it could not be; nothing when
// $GITHUB_STEP_SUMMARY is unset.
void print_step_summary(const StepSummary& s);

struct BackendSelection;

// Streams results to the console as they come, then prints the summary and returns the exit code
// (the gate: --fail-on); with --report-dir also writes the report files and failure dumps.
class ResultSink {
 public:
  ResultSink(const OutputOptions& o, std::string title);
  ~ResultSink();
  // What the run is (for the report, the rerun commands and the progress bar); optional.
  void describe_run(const Selection& s, const SelectedCases& sel, const BackendSelection& b);
  // For RunOptions::on_failure: keeps failing results for their failure dumps (null
  // without --report-dir), which on_result() writes: report a case only after all its backends
  // ran, so that no dump exists while a candidate runs the same case.
  FailureCallback failure_hook();
  void on_result(const CaseResult& r);
  int finish(const std::vector<CaseResult>& results);

 private:
  void write_pending_dump(const CaseResult& r);
  struct State;
  OutputOptions options_;
  bool color_;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<State> state_;
};

// --backend names plus the options some backends take (--device, --cmd, ...).
struct BackendSelection {
  std::vector<std::string> names{"cpu"};
  BackendOptions options;
  bool isolate = false;    // --isolate: each backend call in a child process (--timeout)
  std::string max_memory;  // --max-memory; empty: the default (limits.cc)
};
void add_backend_options(CLI::App* app, BackendSelection& b);
std::vector<std::unique_ptr<Backend>> make_backends(const BackendSelection& b);

// Resource limits (limits.cc): --max-memory SIZE on the commands that allocate cases, in bytes
// (default: half the RAM); throws UsageError on a bad size. A case over the limit given
// explicitly (--case, a fixture) is a usage error: "case '<id>': needs about ..., over ...".
void add_max_memory_option(CLI::App* app, std::string& max_memory);
int64_t max_memory_bytes(const std::string& max_memory);
void refuse_if_too_big(const Case& c, int64_t max_memory_bytes, bool expectation_cache = false);

Command add_run_command(CLI::App& app);
Command add_list_command(CLI::App& app);
Command add_golden_command(CLI::App& app);  // golden.cc
Command add_report_command(CLI::App& app);
Command add_bench_command(CLI::App& app);   // bench.cc: deltacheck bench compare
Command add_shrink_command(CLI::App& app);  // shrink.cc: deltacheck shrink
Command add_hunt_command(CLI::App& app);    // shrink.cc: deltacheck hunt
// report_diff.cc: `deltacheck report diff`, under the report command add_report_command made.
Command add_report_diff_command(CLI::App& app);

// "90s", "10m", "1h", "30" (seconds) -> seconds; throws UsageError naming `what`.
double parse_duration(const std::string& text, const std::string& what);
// run --shrink: the first failure of each backend shrunk (shrink.cc), within the budget each.
void shrink_first_failures(const std::vector<CaseResult>& results,
                           const std::vector<Backend*>& backends, double budget_seconds,
                           bool probes, int64_t max_memory);

// Registers the backends of optional libraries compiled into this build (LibTorch, CUDA).
void register_optional_backends();

}  // namespace deltacheck::cli
