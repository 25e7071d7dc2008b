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

#include "cases/case.h"
#include "harness/backend.h"
#include "harness/result.h"

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
  int64_t seed = -1;
};
void add_selection_options(CLI::App* app, Selection& s);
// The selected cases; throws UsageError on unknown suites, bad ids or regexes.
std::vector<cases::Case> select_cases(const Selection& s);
// "a,b" "c" -> {a, b, c}
std::vector<std::string> split_commas(const std::vector<std::string>& items);

// How results are shown and judged (--quiet, and later report formats): shared by every
// command that runs cases (run, golden verify).
struct OutputOptions {
  bool quiet = false;
};
void add_output_options(CLI::App* app, OutputOptions& o);

// Streams results to the console as they come, then prints the summary and returns the exit code.
class ResultSink {
 public:
  ResultSink(const OutputOptions& o, std::string title);
  void on_result(const harness::CaseResult& r);
  int finish(const std::vector<harness::CaseResult>& results);

 private:
  OutputOptions options_;
  bool color_;
  std::chrono::steady_clock::time_point start_;
};

// --backend names plus the options some backends take (--device, --cmd, ...).
struct BackendSelection {
  std::vector<std::string> names{"cpu"};
  harness::BackendOptions options;
};
void add_backend_options(CLI::App* app, BackendSelection& b);
std::vector<std::unique_ptr<harness::Backend>> make_backends(const BackendSelection& b);

Command add_run_command(CLI::App& app);
Command add_list_command(CLI::App& app);

// Registers the backends of optional libraries compiled into this build (LibTorch, CUDA).
void register_optional_backends();

}  // namespace deltacheck::cli
