// Console report formatting with fmt.
#include "reports/console.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "cases/safe_text.h"
#include "reports/report_text.h"

namespace deltacheck::reports {
namespace {

using harness::Verdict;

const char* color_of(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "\033[32m";
    case Verdict::kFail:
    case Verdict::kError:
      return "\033[31m";
    case Verdict::kLeak:
      return "\033[35m";
    default:
      return "\033[33m";
  }
}

std::string verdict_cell(Verdict v, const ConsoleOptions& o) {
  std::string name = harness::verdict_name(v);
  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string cell = fmt::format("{:<11}", name);
  return o.color ? std::string(color_of(v)) + cell + "\033[0m" : cell;
}

}  // namespace

std::string format_result_line(const harness::CaseResult& r, const ConsoleOptions& o) {
  // Messages, probe details and names can come from a candidate: printed as one line each, with
  // control characters escaped, so they cannot fake a line of their own (or recolour one).
  using cases::printable_line;
  std::string metric;
  int64_t mismatches = 0, compared = 0;
  bool exact = false;
  for (const auto& t : r.tensors)
    if (t.exact) exact = true, mismatches += t.mismatches, compared += t.metrics.count;
  if (exact)
    metric = fmt::format("{:<12} {} of {} differ", "exact", mismatches, compared);
  else if (!r.worst_tensor.empty())
    metric = fmt::format("{:<12} rel_rms {:.1e} {} {:.1e}", r.worst_tensor, r.worst_rel_rms,
                         r.worst_rel_rms <= r.worst_threshold ? "<=" : "> ", r.worst_threshold);
  const std::string margin = r.worst_tensor.empty() ? "" : fmt::format("{:.2f}", r.margin);
  // The declared matmul precision travels with the backend's name where it is not fp32.
  const std::string backend = r.precision.empty() || r.precision == "fp32"
                                  ? r.backend
                                  : r.backend + "[" + r.precision + "]";
  // A pass without its probes says so on its own line (it may be the only one printed).
  const std::string declined = harness::declined_probes(r);
  const std::string annotation = r.verdict == Verdict::kPass && !declined.empty()
                                     ? " (probes declined: " + declined + ")"
                                     : "";
  std::string line =
      fmt::format("{} {:<28} {:<38} {:>5} {}{}\n", verdict_cell(r.verdict, o),
                  printable_line(backend), metric, margin, printable_line(r.case_id), annotation);
  for (const std::string& reason : reason_lines(r))
    line += fmt::format("{:12}{}\n", "", printable_line(reason, 1 << 16));
  return line;
}

std::string format_summary(const std::vector<harness::CaseResult>& results, double seconds,
                           const ConsoleOptions& o) {
  const std::vector<Verdict> order{Verdict::kPass,  Verdict::kFail,        Verdict::kLeak,
                                   Verdict::kError, Verdict::kUnsupported, Verdict::kSkipped};
  std::map<std::string, std::map<Verdict, int>> per_backend;
  std::vector<std::string> backends;
  std::map<Verdict, int> totals;
  std::set<std::string> cases, failing;
  for (const auto& r : results) {
    if (!per_backend.count(r.backend)) backends.push_back(r.backend);
    per_backend[r.backend][r.verdict]++;
    totals[r.verdict]++;
    cases.insert(r.case_id);
    if (std::find(o.fail_on.begin(), o.fail_on.end(), r.verdict) != o.fail_on.end())
      failing.insert(r.case_id);
  }
  std::string s = "\n";
  s += fmt::format("{:<30}", "backend");
  for (Verdict v : order) s += fmt::format("{:>12}", harness::verdict_name(v));
  s += "\n";
  for (const auto& b : backends) {
    s += fmt::format("{:<30}", b);
    for (Verdict v : order) s += fmt::format("{:>12}", per_backend[b][v]);
    s += "\n";
  }
  const int unprobed = passes_without_probes(results);
  std::string counts;
  for (Verdict v : order)
    if (totals[v] > 0)
      counts += fmt::format(
          "{}{} {}{}", counts.empty() ? "" : ", ", totals[v], harness::verdict_name(v),
          v == Verdict::kPass && unprobed > 0 ? fmt::format(" ({} without probes)", unprobed)
                                              : std::string());
  if (unprobed > 0) s += "\n" + passes_without_probes_line(unprobed) + "\n";
  const bool bad = !failing.empty();
  s += fmt::format("\n{}deltacheck: {} cases x {} backends: {} in {:.1f} s — {}{}\n",
                   o.color ? (bad ? "\033[31m" : "\033[32m") : "", cases.size(), backends.size(),
                   counts, seconds, bad ? "FAILED" : "OK", o.color ? "\033[0m" : "");
  return s;
}

}  // namespace deltacheck::reports
