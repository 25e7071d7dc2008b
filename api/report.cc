// Console lines, the gate and report files for results of the public API
// (include/deltacheck/report.h), built the way `deltacheck run` builds them
// (tools/deltacheck/output.cc), from the same report model and its one assembly.
#include "deltacheck/report.h"

#include <algorithm>

#include "backends/registry.h"
#include "harness/tolerance.h"
#include "reports/console.h"

namespace deltacheck {

std::string tolerance_policy() { return harness::describe_policy(); }

std::string format_result(const CaseResult& r, bool color) {
  reports::ConsoleOptions o;
  o.color = color;
  return reports::format_result_line(r, o);
}

std::string format_result(const CaseResult& r, const ConsoleOptions& options) {
  return reports::format_result_line(r, options);
}

std::vector<Verdict> default_fail_on() { return reports::default_fail_on(); }

bool fails(const std::vector<CaseResult>& results, const std::vector<Verdict>& fail_on) {
  return std::any_of(results.begin(), results.end(),
                     [&](const CaseResult& r) { return reports::in(fail_on, r.verdict); });
}

std::string format_summary(const std::vector<CaseResult>& results, double seconds,
                           const std::vector<Verdict>& fail_on) {
  reports::ConsoleOptions o;
  o.fail_on = fail_on;
  return reports::format_summary(results, seconds, o);
}

std::string format_summary(const std::vector<CaseResult>& results, double seconds,
                           const ConsoleOptions& options) {
  return reports::format_summary(results, seconds, options);
}

Report make_report(const std::vector<CaseResult>& results, const ReportOptions& options) {
  reports::RunRecord run;
  run.fail_on = options.fail_on;
  run.started_at = reports::utc_now_iso8601();
  run.seconds = options.seconds;
  if (options.selection) {
    const Selection& sel = *options.selection;
    run.selection = {
        {"suite", sel.ids().empty() ? nlohmann::ordered_json(sel.suite_name()) : nullptr},
        {"cases", sel.ids()},
        {"filter", sel.filters().size() == 1 ? nlohmann::ordered_json(sel.filters()[0])
                   : sel.filters().empty()   ? nlohmann::ordered_json("")
                                             : nlohmann::ordered_json(sel.filters())},
        {"seed", sel.seed_override() >= 0 ? nlohmann::ordered_json(sel.seed_override()) : nullptr},
    };
    if (!sel.excludes().empty()) run.selection["exclude"] = sel.excludes();
    run.shard_index = sel.shard_index();
    run.shard_count = sel.shard_count();
    // Each case's position in the unsharded selection orders merged shards.
    Selection whole = sel;
    whole.shard(0, 1);
    const std::vector<Case> all = select(whole);
    for (size_t i = 0; i < all.size(); ++i)
      run.index_of.emplace(all[i].id(), static_cast<int64_t>(i));
    run.selected = static_cast<int64_t>(all.size());
  } else {
    run.selection = {{"suite", nullptr},
                     {"cases", nlohmann::ordered_json::array()},
                     {"filter", ""},
                     {"seed", nullptr}};
  }
  // The tool can rerun its own backends only; a user's backend lives in the user's program.
  run.rerunnable.emplace();
  for (const auto& b : backends::list_backends()) run.rerunnable->insert(b.name);
  return reports::assemble_report(results, run);
}

Status write_report(const Report& report, const std::string& dir) {
  return reports::write_report_files(report, dir).status;
}

}  // namespace deltacheck
