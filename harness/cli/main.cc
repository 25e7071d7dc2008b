// deltacheck: the command-line tool. Exit codes: 0 all pass, 1 a failing verdict, 2 usage or
// input error. Diagnostics are one line on stderr, prefixed "deltacheck: error: ".
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "harness/tolerance.h"
#include "reports/console.h"

namespace dc = deltacheck;

namespace {

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      if (comma == std::string::npos) comma = item.size();
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

struct Selection {
  std::string suite = "smoke";
  std::vector<std::string> case_ids;
  std::string filter;
  int64_t seed = -1;
};

void add_selection_options(CLI::App* app, Selection& s) {
  app->add_option("--suite,-s", s.suite, "suite to run: smoke, gate, full")->capture_default_str();
  app->add_option("--case", s.case_ids, "run exactly this case id (repeatable; overrides --suite)");
  app->add_option("--filter,-f", s.filter, "keep cases whose id matches this regex (ECMAScript)");
  app->add_option("--seed", s.seed, "replace every case's seed with this one");
}

std::vector<dc::cases::Case> select_cases(const Selection& s) {
  std::vector<dc::cases::Case> cs;
  try {
    if (!s.case_ids.empty()) {
      for (const auto& id : s.case_ids) cs.push_back(dc::cases::Case::parse(id));
    } else {
      cs = dc::cases::suite(s.suite);
    }
    if (s.seed >= 0)
      for (auto& c : cs) c = c.with("seed", std::to_string(s.seed));
  } catch (const dc::cases::CaseIdError& e) {
    throw UsageError(e.what());
  }
  if (!s.filter.empty()) {
    std::regex re;
    try {
      re = std::regex(s.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw UsageError("--filter '" + s.filter + "' is not a valid regex: " + e.what());
    }
    std::vector<dc::cases::Case> kept;
    for (auto& c : cs)
      if (std::regex_search(c.id(), re)) kept.push_back(c);
    cs = std::move(kept);
  }
  return cs;
}

int cmd_run(const Selection& sel, const std::vector<std::string>& backend_names, int jobs,
            bool quiet) {
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

int cmd_list(const std::string& what, const Selection& sel) {
  if (what == "suites" || what.empty()) {
    std::printf("suites:\n");
    for (const auto& s : dc::cases::list_suites())
      std::printf("  %-8s %4zu cases  %s\n", s.name.c_str(), dc::cases::suite(s.name).size(),
                  s.help.c_str());
  }
  if (what == "backends" || what.empty()) {
    std::printf("backends:\n");
    for (const auto& b : dc::harness::list_backends())
      if (!b.deliberately_wrong) std::printf("  %-30s %s\n", b.name.c_str(), b.description.c_str());
    std::printf("deliberately wrong backends (they prove the harness can fail):\n");
    for (const auto& b : dc::harness::list_backends())
      if (b.deliberately_wrong) std::printf("  %-30s %s\n", b.name.c_str(), b.description.c_str());
  }
  if (what == "ops" || what.empty()) {
    std::printf("operations and case-id parameters:\n");
    for (const auto& s : dc::cases::op_schemas()) {
      std::printf("  %s: %s\n", s.op.c_str(), s.help.c_str());
      for (const auto& p : s.params)
        std::printf("    %-8s default %-12s %s\n", p.key.c_str(), p.default_value.c_str(),
                    p.help.c_str());
    }
  }
  if (what == "cases") {
    for (const auto& c : select_cases(sel)) std::printf("%s\n", c.id().c_str());
  }
  if (!what.empty() && what != "suites" && what != "backends" && what != "ops" && what != "cases")
    throw UsageError("list what? '" + what + "' (suites, backends, ops, cases)");
  return kExitPass;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deltacheck: conformance and differential testing of the gated delta rule"};
  app.set_version_flag("--version", std::string("deltacheck ") + DELTACHECK_VERSION);
  app.require_subcommand(1);
  app.footer(R"(examples:
  deltacheck run --suite smoke --backend cpu
  deltacheck run --suite smoke --backend cpu,wrong:ignore-cu-seqlens
  deltacheck run --suite gate --filter 'layout=packed.*dtype=bf16' --jobs 2
  deltacheck run --case 'gdr(layout=packed[63,0,65],dtype=bf16,gate=strong,seed=7)'
  deltacheck list backends
  deltacheck list cases --suite gate --filter 'gate=tail'
exit codes: 0 all pass, 1 a case failed (fail, leak, error), 2 usage or input error)");

  Selection sel;
  std::vector<std::string> backends{"cpu"};
  int jobs = 1;
  bool quiet = false;
  CLI::App* run = app.add_subcommand("run", "run cases on backends and report verdicts");
  add_selection_options(run, sel);
  run->add_option("--backend,-b", backends, "backends, comma-separated (see: deltacheck list)")
      ->capture_default_str();
  run->add_option("--jobs,-j", jobs, "cases run concurrently")->capture_default_str();
  run->add_flag("--quiet,-q", quiet, "print only cases that are not a pass");

  std::string list_what;
  CLI::App* list = app.add_subcommand("list", "list suites, backends, ops or the cases of a suite");
  list->add_option("what", list_what, "suites | backends | ops | cases (default: all but cases)");
  add_selection_options(list, sel);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "deltacheck: error: %s (see deltacheck --help)\n", e.what());
    return kExitUsage;
  }
  try {
    if (run->parsed()) return cmd_run(sel, backends, jobs, quiet);
    if (list->parsed()) return cmd_list(list_what, sel);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deltacheck: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltacheck: error: %s\n", e.what());
    return kExitUsage;
  }
  return kExitUsage;
}
