// deltacheck run: run cases on backends and report verdicts.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "harness/backend.h"
#include "harness/cli/commands.h"
#include "harness/runner.h"
#include "harness/tolerance.h"
#include "reports/console.h"

namespace deltacheck::cli {
namespace {

namespace dc = deltacheck;

struct RunArgs {
  Selection sel;
  std::vector<std::string> backends{"cpu"};
  int jobs = 1;
  bool quiet = false;
};

int run(const RunArgs& a) {
  const Selection& sel = a.sel;
  const std::vector<std::string>& backend_names = a.backends;
  const int jobs = a.jobs;
  const bool quiet = a.quiet;
  const std::vector<dc::cases::Case> cs = select_cases(sel);
  if (cs.empty()) throw UsageError("no case selected (check --suite, --case and --filter)");
  std::vector<std::unique_ptr<dc::harness::Backend>> owned;
  std::vector<dc::harness::Backend*> backends;
  for (const std::string& name : split_commas(backend_names)) {
    try {
      owned.push_back(dc::harness::make_backend(name));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    backends.push_back(owned.back().get());
  }
  if (backends.empty()) throw UsageError("no backend given (--backend cpu)");
  if (jobs < 1) throw UsageError("--jobs must be >= 1");

  dc::reports::ConsoleOptions copt;
  copt.color = isatty(fileno(stdout));
  copt.only_failures = quiet;
  std::printf("deltacheck %s: %zu cases x %zu backends; tolerance %s\n", DELTACHECK_VERSION,
              cs.size(), backends.size(), dc::harness::describe_policy().c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  dc::harness::RunOptions ropt;
  ropt.jobs = jobs;
  const auto results = dc::harness::run_all(cs, backends, ropt, [&](const auto& r) {
    if (quiet && r.verdict == dc::harness::Verdict::kPass) return;
    std::fputs(dc::reports::format_result_line(r, copt).c_str(), stdout);
    std::fflush(stdout);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fputs(dc::reports::format_summary(results, secs, copt).c_str(), stdout);
  for (const auto& r : results)
    if (dc::harness::is_failure(r.verdict)) {
      std::printf("rerun the first failing case: deltacheck run --backend %s --case '%s'\n",
                  r.backend.c_str(), r.case_id.c_str());
      return kExitFail;
    }
  return kExitPass;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "run cases on backends and report verdicts");
  add_selection_options(cmd, args->sel);
  cmd->add_option("--backend,-b", args->backends, "backends, comma-separated (deltacheck list)")
      ->capture_default_str();
  cmd->add_option("--jobs,-j", args->jobs, "cases run concurrently")->capture_default_str();
  cmd->add_flag("--quiet,-q", args->quiet, "print only cases that are not a pass");
  return {cmd, [args] { return run(*args); }};
}

}  // namespace deltacheck::cli
