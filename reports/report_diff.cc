// Drift between two reports (reports/report_diff.h).
#include "reports/report_diff.h"

#include <fmt/format.h>

#include <map>
#include <utility>

namespace deltacheck::reports {
namespace {

using harness::Verdict;
using harness::verdict_name;
using Key = std::pair<std::string, std::string>;  // (case id, backend)

DiffRow row(const harness::CaseResult* o, const harness::CaseResult* n) {
  DiffRow r;
  const harness::CaseResult& any = n ? *n : *o;
  r.case_id = any.case_id;
  r.backend = any.backend;
  if (o) r.old_verdict = o->verdict, r.old_margin = o->margin;
  if (n) r.new_verdict = n->verdict, r.new_margin = n->margin, r.message = n->message;
  return r;
}

std::string growth(const DiffRow& r) {
  return r.old_margin > 0 ? fmt::format("{:.1f}x", r.new_margin / r.old_margin) : "from 0";
}

}  // namespace

ReportDiff diff_reports(const Report& old_report, const Report& new_report, const DiffOptions& o) {
  ReportDiff d;
  d.margin_factor = o.margin_factor;
  std::map<Key, const harness::CaseResult*> old_results;
  for (const Entry& e : old_report.entries)
    old_results[{e.result.case_id, e.result.backend}] = &e.result;
  std::map<Key, bool> seen;
  for (const Entry& e : new_report.entries) {
    const Key k{e.result.case_id, e.result.backend};
    seen[k] = true;
    const auto it = old_results.find(k);
    if (it == old_results.end()) {
      d.added.push_back(row(nullptr, &e.result));
      continue;
    }
    ++d.compared;
    const harness::CaseResult& was = *it->second;
    if (was.verdict != e.result.verdict) {
      d.verdict_changes.push_back(row(&was, &e.result));
    } else if (e.result.verdict == Verdict::kPass && e.result.margin >= o.min_margin &&
               e.result.margin > 0 && e.result.margin >= o.margin_factor * was.margin) {
      d.margin_growth.push_back(row(&was, &e.result));
    }
  }
  for (const Entry& e : old_report.entries)
    if (!seen.count({e.result.case_id, e.result.backend}))
      d.gone.push_back(row(&e.result, nullptr));
  return d;
}

std::string format_diff_text(const ReportDiff& d, const std::string& old_name,
                             const std::string& new_name) {
  std::string out;
  for (const DiffRow& r : d.verdict_changes)
    out += fmt::format("VERDICT  {:<24} {} -> {}  {}\n         {}\n", r.backend,
                       verdict_name(r.old_verdict), verdict_name(r.new_verdict), r.case_id,
                       r.message.empty() ? "(no reason: a pass)" : r.message);
  for (const DiffRow& r : d.margin_growth)
    out += fmt::format("MARGIN   {:<24} {:.3g} -> {:.3g} ({})  {}\n", r.backend, r.old_margin,
                       r.new_margin, growth(r), r.case_id);
  for (const DiffRow& r : d.added)
    out +=
        fmt::format("NEW      {:<24} {}  {}\n", r.backend, verdict_name(r.new_verdict), r.case_id);
  for (const DiffRow& r : d.gone)
    out +=
        fmt::format("GONE     {:<24} {}  {}\n", r.backend, verdict_name(r.old_verdict), r.case_id);
  out += fmt::format(
      "report diff {} -> {}: {} results compared, {} verdict change{}, {} margin{} grown {}x or "
      "more, {} new, {} gone — {}\n",
      old_name, new_name, d.compared, d.verdict_changes.size(),
      d.verdict_changes.size() == 1 ? "" : "s", d.margin_growth.size(),
      d.margin_growth.size() == 1 ? "" : "s", d.margin_factor, d.added.size(), d.gone.size(),
      d.drifted() ? "DRIFTED" : "unchanged");
  return out;
}

std::string format_diff_markdown(const ReportDiff& d, const std::string& old_name,
                                 const std::string& new_name) {
  auto code = [](const std::string& s) {
    std::string t;
    for (char c : s)
      t += c == '|' ? std::string("\\|") : c == '`' ? std::string("'") : std::string(1, c);
    return "`" + t + "`";
  };
  std::string out =
      fmt::format("## deltacheck report diff: {} → {}\n\n", code(old_name), code(new_name));
  out += fmt::format(
      "{} results compared: **{} verdict change{}**, **{} margin{} grown {}× or more**, {} new, "
      "{} gone.\n",
      d.compared, d.verdict_changes.size(), d.verdict_changes.size() == 1 ? "" : "s",
      d.margin_growth.size(), d.margin_growth.size() == 1 ? "" : "s", d.margin_factor,
      d.added.size(), d.gone.size());
  if (!d.verdict_changes.empty()) {
    out += "\n| backend | verdict | case | reason |\n| --- | --- | --- | --- |\n";
    for (const DiffRow& r : d.verdict_changes)
      out += fmt::format("| {} | {} → **{}** | {} | {} |\n", code(r.backend),
                         verdict_name(r.old_verdict), verdict_name(r.new_verdict), code(r.case_id),
                         r.message.empty() ? "" : code(r.message));
  }
  if (!d.margin_growth.empty()) {
    out += "\n| backend | margin | growth | case |\n| --- | --- | --- | --- |\n";
    for (const DiffRow& r : d.margin_growth)
      out += fmt::format("| {} | {:.3g} → {:.3g} | {} | {} |\n", code(r.backend), r.old_margin,
                         r.new_margin, growth(r), code(r.case_id));
  }
  return out;
}

}  // namespace deltacheck::reports
