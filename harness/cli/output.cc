// Console output and the exit code of commands that run cases; backend selection.
#include <unistd.h>

#include <cstdio>

#include "harness/cli/commands.h"
#include "harness/tolerance.h"
#include "reports/console.h"

namespace deltacheck::cli {

void add_output_options(CLI::App* app, OutputOptions& o) {
  app->add_flag("--quiet,-q", o.quiet, "print only cases that are not a pass");
}

ResultSink::ResultSink(const OutputOptions& o, std::string title)
    : options_(o), color_(isatty(fileno(stdout))), start_(std::chrono::steady_clock::now()) {
  std::printf("deltacheck %s: %s; tolerance %s\n", DELTACHECK_VERSION, title.c_str(),
              harness::describe_policy().c_str());
  std::fflush(stdout);
}

void ResultSink::on_result(const harness::CaseResult& r) {
  if (options_.quiet && r.verdict == harness::Verdict::kPass) return;
  reports::ConsoleOptions c{color_, options_.quiet};
  std::fputs(reports::format_result_line(r, c).c_str(), stdout);
  std::fflush(stdout);
}

int ResultSink::finish(const std::vector<harness::CaseResult>& results) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  reports::ConsoleOptions c{color_, options_.quiet};
  std::fputs(reports::format_summary(results, secs, c).c_str(), stdout);
  for (const auto& r : results)
    if (harness::is_failure(r.verdict)) {
      std::printf("rerun the first failing case: deltacheck run --backend %s --case '%s'\n",
                  r.backend.c_str(), r.case_id.c_str());
      return kExitFail;
    }
  return kExitPass;
}

void add_backend_options(CLI::App* app, BackendSelection& b) {
  app->add_option("--backend,-b", b.names, "backends, comma-separated (deltacheck list)")
      ->capture_default_str();
  app->add_option("--device", b.options.device, "torch backend device: cpu | cuda")
      ->capture_default_str();
  app->add_option("--cmd", b.options.cmd,
                  "external backend: command, e.g. 'python3 x.py {in} {out}'");
  app->add_option("--timeout", b.options.timeout_s, "external backend: seconds per case")
      ->capture_default_str();
  app->add_option("--library", b.options.library, "torch-op backend: shared library to load");
  app->add_option("--op", b.options.op, "torch-op backend: operator, e.g. myns::my_op");
}

std::vector<std::unique_ptr<harness::Backend>> make_backends(const BackendSelection& b) {
  std::vector<std::unique_ptr<harness::Backend>> out;
  for (const std::string& name : split_commas(b.names)) {
    try {
      out.push_back(harness::make_backend(name, b.options));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  if (out.empty()) throw UsageError("no backend given (--backend cpu)");
  return out;
}

}  // namespace deltacheck::cli
