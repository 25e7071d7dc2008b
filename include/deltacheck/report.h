// Reports of results: the console lines `deltacheck run` prints, the gate (which verdicts fail a
// run), and the report files — report.json, junit.xml (CI test reports), summary.md (a job
// summary) and report.html (one self-contained page) — from one Report model, written the way
// `deltacheck run --report-dir` writes them (docs/reports.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "deltacheck/case.h"
#include "deltacheck/result.h"
#include "reports/report.h"

namespace deltacheck {

// The result's console row (verdict, backend, worst tensor against its threshold, margin, id)
// plus, for anything that is not a pass, an indented line with the reason (a leak names the
// sequence, its first wrong token and its max |Δ|). Ends with a newline.
std::string format_result(const CaseResult& r, bool color = false);

// The verdicts that fail a run: fail, leak and error by default.
std::vector<Verdict> default_fail_on();
// Whether any result has a verdict in `fail_on`.
bool fails(const std::vector<CaseResult>& results,
           const std::vector<Verdict>& fail_on = default_fail_on());
// Totals per backend and verdict and the final line,
// "deltacheck: N cases x M backends: ... in T s — OK" (or FAILED, per `fail_on`).
std::string format_summary(const std::vector<CaseResult>& results, double seconds,
                           const std::vector<Verdict>& fail_on = default_fail_on());

// The report model (reports/report.h): provenance, selection, gate and one entry per result;
// every format is a pure function of it, and report.json round-trips it.
using Report = reports::Report;
using ReportEntry = reports::Entry;

struct ReportOptions {
  // What was run, recorded in the report (and the shard it was); none: just the cases run.
  std::optional<Selection> selection;
  std::vector<Verdict> fail_on = default_fail_on();
  double seconds = 0.0;  // wall time of the run
};
// A report of results (from run()); throws what select() throws for a bad selection. Failing
// results of backends the deltacheck tool knows get a rerun command; others (your backend) carry
// their case id only.
Report make_report(const std::vector<CaseResult>& results, const ReportOptions& options = {});

// The formats, each a pure function of the report.
using reports::format_html;
using reports::format_json;
using reports::format_junit;
using reports::format_markdown;

// Writes report.json, junit.xml, summary.md and report.html into `dir` (created if needed), each
// atomically (temporary file, then rename). Failure dumps are the tool's (--report-dir).
Status write_report(const Report& report, const std::string& dir);

// Reads a report.json (or a report directory) back, e.g. to merge shards with
// reports::merge_reports or `deltacheck report merge`.
using LoadedReport = reports::LoadedReport;
using reports::read_report;

}  // namespace deltacheck
