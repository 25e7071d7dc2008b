// summary.md: a short Markdown summary for a CI job page ($GITHUB_STEP_SUMMARY, GitLab
// artifacts): the gate, totals per backend and verdict, totals per case family (op, layout kind,
// cache mode), then the failures grouped by family with their reasons and rerun commands. Long
// failure lists are cut; the full list is in report.html and junit.xml.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
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

// A table of verdict counts, one row per key (shown as its cell); counts that fail the gate bold.
std::string verdict_table(const Report& r, const std::string& title,
                          const std::vector<std::string>& keys,
                          const std::vector<std::string>& cells,
                          std::map<std::string, std::map<Verdict, int>>& counts) {
  std::string o = "| " + title + " |";
  for (Verdict v : verdict_order()) o += fmt::format(" {} |", harness::verdict_name(v));
  o += "\n| --- |";
  for (size_t i = 0; i < verdict_order().size(); ++i) o += " ---: |";
  o += "\n";
  for (size_t k = 0; k < keys.size(); ++k) {
    o += "| " + cells[k] + " |";
    for (Verdict v : verdict_order()) {
      const int n = counts[keys[k]][v];
      o += n > 0 && in(r.fail_on, v) ? fmt::format(" **{}** |", n) : fmt::format(" {} |", n);
    }
    o += "\n";
  }
  return o;
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
  std::vector<harness::CaseResult> results;
  for (const Entry& e : r.entries) results.push_back(e.result);
  const int unprobed = passes_without_probes(results);
  std::string tally;
  for (Verdict v : verdict_order())
    if (totals[v] > 0)
      tally += fmt::format(
          "{}{} {}{}", tally.empty() ? "" : ", ", totals[v], harness::verdict_name(v),
          v == Verdict::kPass && unprobed > 0 ? fmt::format(" ({} without probes)", unprobed)
                                              : std::string());
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
  std::vector<std::string> backend_cells;
  for (const std::string& b : backends) backend_cells.push_back(code(b));
  o += verdict_table(r, "backend", backends, backend_cells, counts);
  if (unprobed > 0) o += "\n" + passes_without_probes_line(unprobed) + ".\n";
  // Families in order of first appearance, with their verdict counts and failures.
  std::vector<std::string> families;
  std::map<std::string, std::map<Verdict, int>> family_counts;
  std::map<std::string, std::vector<const Entry*>> family_failures;
  std::vector<const Entry*> failures;
  for (const Entry& e : r.entries) {
    if (!family_counts.count(e.family)) families.push_back(e.family);
    family_counts[e.family][e.result.verdict]++;
    if (e.result.verdict != Verdict::kPass && e.result.verdict != Verdict::kSkipped &&
        e.result.verdict != Verdict::kUnsupported)
      family_failures[e.family].push_back(&e);
  }
  std::vector<std::string> family_cells;
  for (const std::string& f : families) family_cells.push_back(cell(f));
  o += "\n" + verdict_table(r, "family", families, family_cells, family_counts);
  for (const std::string& f : families)
    for (const Entry* e : family_failures[f]) failures.push_back(e);
  if (failures.empty()) return o + "\nNo failures.\n";
  o += fmt::format("\n### Failures ({})\n", failures.size());
  int rows = 0;
  for (const std::string& f : families) {
    if (family_failures[f].empty() || rows >= kMaxFailureRows) continue;
    o += fmt::format(
        "\n#### {} ({})\n\n| verdict | backend | case | reason |\n| --- | --- | --- | --- |\n",
        cell(f), family_failures[f].size());
    for (const Entry* e : family_failures[f]) {
      if (rows++ == kMaxFailureRows) break;
      o += fmt::format("| {} | {} | {} | {} |\n", harness::verdict_name(e->result.verdict),
                       code(e->result.backend), code(readable_case_id(e->result.case_id)),
                       cell(failure_headline(e->result)));
    }
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

StepSummary append_step_summary(const Report& r) {
  StepSummary out;
  const char* path = std::getenv("GITHUB_STEP_SUMMARY");
  if (!path || !*path) return out;
  out.path = path;
  std::ofstream f(path, std::ios::app | std::ios::binary);
  if (f) f << format_markdown(r) << "\n";
  if (!f)
    out.status = Status::InvalidArgument("cannot append the job summary to $GITHUB_STEP_SUMMARY (" +
                                         out.path + ")");
  return out;
}

}  // namespace deltacheck::reports
