// Console lines, the gate and report files for results of the public API
// (include/deltacheck/report.h), built the way `deltacheck run` builds them
// (harness/cli/output.cc), from the same report model.
#include "deltacheck/report.h"

#include <algorithm>
#include <map>
#include <set>

#include "harness/backend.h"
#include "harness/tolerance.h"
#include "reports/console.h"

namespace deltacheck {

std::string tolerance_policy() { return harness::describe_policy(); }

std::string format_result(const CaseResult& r, bool color) {
  reports::ConsoleOptions o;
  o.color = color;
  return reports::format_result_line(r, o);
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

Report make_report(const std::vector<CaseResult>& results, const ReportOptions& options) {
  Report rep;
  rep.tool_version = reports::tool_version();
  rep.git_revision = reports::git_revision();
  rep.tolerance = harness::describe_policy();
  rep.fail_on = options.fail_on;
  rep.machines = {reports::this_machine()};
  rep.command = reports::this_command_line();
  rep.started_at = reports::utc_now_iso8601();
  rep.seconds = options.seconds;

  // Each case's position in the unsharded selection orders merged shards; cases that are not in
  // it follow in the order they come.
  std::map<std::string, int64_t> index_of;
  int64_t selected = -1;
  if (options.selection) {
    const Selection& sel = *options.selection;
    rep.selection = {
        {"suite", sel.ids().empty() ? nlohmann::ordered_json(sel.suite_name()) : nullptr},
        {"cases", sel.ids()},
        {"filter", sel.filters().size() == 1 ? nlohmann::ordered_json(sel.filters()[0])
                   : sel.filters().empty()   ? nlohmann::ordered_json("")
                                             : nlohmann::ordered_json(sel.filters())},
        {"seed", sel.seed_override() >= 0 ? nlohmann::ordered_json(sel.seed_override()) : nullptr},
    };
    if (!sel.excludes().empty()) rep.selection["exclude"] = sel.excludes();
    rep.shard_index = sel.shard_index();
    rep.shard_count = sel.shard_count();
    Selection whole = sel;
    whole.shard(0, 1);
    const std::vector<Case> all = select(whole);
    for (size_t i = 0; i < all.size(); ++i) index_of.emplace(all[i].id(), static_cast<int64_t>(i));
    selected = static_cast<int64_t>(all.size());
  } else {
    rep.selection = {{"suite", nullptr},
                     {"cases", nlohmann::ordered_json::array()},
                     {"filter", ""},
                     {"seed", nullptr}};
  }
  std::set<std::string> known_backends;
  for (const auto& b : harness::list_backends()) known_backends.insert(b.name);
  int64_t next_index = selected > 0 ? selected : 0;
  for (const CaseResult& r : results) {
    if (std::find(rep.backends.begin(), rep.backends.end(), r.backend) == rep.backends.end())
      rep.backends.push_back(r.backend);
    auto it = index_of.find(r.case_id);
    if (it == index_of.end()) it = index_of.emplace(r.case_id, next_index++).first;
    reports::Entry e = reports::make_entry(r, it->second);
    // The tool can rerun its own backends only; a user's backend lives in the user's program.
    if (!known_backends.count(r.backend)) e.rerun.clear();
    rep.entries.push_back(std::move(e));
  }
  rep.selected_cases = std::max<int64_t>(selected, static_cast<int64_t>(index_of.size()));
  return rep;
}

Status write_report(const Report& report, const std::string& dir) {
  return reports::write_report_files(report, dir).status;
}

}  // namespace deltacheck
