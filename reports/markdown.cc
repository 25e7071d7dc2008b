// summary.md: a short Markdown summary for a CI job page ($GITHUB_STEP_SUMMARY, GitLab
// artifacts): the gate, totals per backend and verdict, then the failures with their reasons and
// rerun commands. Long failure lists are cut; the full list is in report.html and junit.xml.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "reports/report.h"
#include "reports/report_text.h"

namespace deltacheck::reports {
namespace {

using harness::Verdict;

// GitHub caps a step summary at 1 MiB; this many rows stays far below it.
constexpr int kMaxFailureRows = 100;

// Table cells: no newlines, no unescaped pipes.
std::string cell(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|')
      o += "\\|";
    else if (ch == '\n' || ch == '\r')
      o += ' ';
    else
      o += ch;
  }
  return o;
}

std::string code(const std::string& s) {
  // A backtick inside would end the span; case ids and backend names have none, messages might.
  return s.find('`') == std::string::npos ? "`" + cell(s) + "`" : cell(s);
}

}  // namespace

std::string format_markdown(const Report& r) {
  std::map<std::string, std::map<Verdict, int>> counts;
  std::map<Verdict, int> totals;
  std::vector<std::string> backends = r.backends;
  for (const Entry& e : r.entries) {
    counts[e.result.backend][e.result.verdict]++;
    totals[e.result.verdict]++;
    if (std::find(backends.begin(), backends.end(), e.result.backend) == backends.end())
      backends.push_back(e.result.backend);
  }
  std::string tally;
  for (Verdict v : verdict_order())
    if (totals[v] > 0)
      tally +=
          fmt::format("{}{} {}", tally.empty() ? "" : ", ", totals[v], harness::verdict_name(v));
  const bool failed = fails_gate(r);
  std::string o = fmt::format("## deltacheck: {} — {} cases × {} backends: {}\n\n",
                              failed ? "FAILED" : "passed", r.selected_cases, backends.size(),
                              tally.empty() ? "nothing ran" : tally);
  std::string machine = r.machines.empty() ? "" : r.machines.front().hostname;
  if (r.machines.size() > 1) machine += fmt::format(" and {} more", r.machines.size() - 1);
  o += fmt::format(
      "deltacheck {} ({}), tolerance `{}`, gate fails on `{}`; {:.1f} s on {}{}\n\n",
      r.tool_version, r.git_revision, r.tolerance, fail_on_string(r.fail_on), r.seconds, machine,
      r.shard_count > 1       ? fmt::format(" (shard {}/{})", r.shard_index, r.shard_count)
      : r.merged_from.empty() ? ""
                              : fmt::format(" (merged from {} reports)", r.merged_from.size()));
  o += "| backend |";
  for (Verdict v : verdict_order()) o += fmt::format(" {} |", harness::verdict_name(v));
  o += "\n| --- |";
  for (size_t i = 0; i < verdict_order().size(); ++i) o += " ---: |";
  o += "\n";
  for (const std::string& b : backends) {
    o += "| " + code(b) + " |";
    for (Verdict v : verdict_order()) {
      const int n = counts[b][v];
      o += n > 0 && in(r.fail_on, v) ? fmt::format(" **{}** |", n) : fmt::format(" {} |", n);
    }
    o += "\n";
  }
  std::vector<const Entry*> failures;
  for (const Entry& e : r.entries)
    if (e.result.verdict != Verdict::kPass && e.result.verdict != Verdict::kSkipped &&
        e.result.verdict != Verdict::kUnsupported)
      failures.push_back(&e);
  if (failures.empty()) return o + "\nNo failures.\n";
  o += fmt::format(
      "\n### Failures ({})\n\n| verdict | backend | case | reason |\n| --- | --- | --- | --- |\n",
      failures.size());
  int rows = 0;
  for (const Entry* e : failures) {
    if (rows++ == kMaxFailureRows) break;
    o += fmt::format("| {} | {} | {} | {} |\n", harness::verdict_name(e->result.verdict),
                     code(e->result.backend), code(e->result.case_id),
                     cell(failure_headline(e->result)));
  }
  if (static_cast<int>(failures.size()) > kMaxFailureRows)
    o += fmt::format("\n… and {} more (report.html and junit.xml list them all).\n",
                     failures.size() - kMaxFailureRows);
  o += "\n<details><summary>Rerun a failing case</summary>\n\n```sh\n";
  rows = 0;
  for (const Entry* e : failures) {
    if (rows++ == kMaxFailureRows) break;
    if (!e->rerun.empty()) o += e->rerun + "\n";
  }
  o += "```\n\n</details>\n";
  return o;
}

}  // namespace deltacheck::reports
