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
#include "deltacheck/runner.h"
#include "reports/console.h"
#include "reports/failure_dump.h"
#include "reports/report.h"
#include "reports/report_dir.h"

namespace deltacheck {

// The result's console row (verdict, backend, worst tensor against its threshold, margin, id)
// plus, for anything that is not a pass, an indented line with the reason (a leak names the
// sequence, its first wrong token and its max |Δ|). Ends with a newline.
std::string format_result(const CaseResult& r, bool color = false);

// The same with every console option: color, only_failures (the summary's failing ids only; the
// tool's --quiet), fail_on.
using ConsoleOptions = reports::ConsoleOptions;
std::string format_result(const CaseResult& r, const ConsoleOptions& options);

// The verdicts that fail a run: fail, leak and error by default.
std::vector<Verdict> default_fail_on();
// Whether any result has a verdict in `fail_on`.
bool fails(const std::vector<CaseResult>& results,
           const std::vector<Verdict>& fail_on = default_fail_on());
// Totals per backend and verdict and the final line,
// "deltacheck: N cases x M backends: ... in T s — OK" (or FAILED, per `fail_on`).
std::string format_summary(const std::vector<CaseResult>& results, double seconds,
                           const std::vector<Verdict>& fail_on = default_fail_on());
std::string format_summary(const std::vector<CaseResult>& results, double seconds,
                           const ConsoleOptions& options);
// "fail,leak" -> verdicts (InvalidArgument naming a bad one; "pass" cannot fail a gate).
using reports::parse_fail_on;
// Whether a report's results fail its gate (its fail_on).
using reports::fails_gate;

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
// What make_report does, with every field of the run given (the tool's route): RunRecord holds
// selection (JSON), backends, fail_on, index_of (case id -> position in the unsharded
// selection), selected, shard_index / shard_count, backend_options (repeated in rerun commands),
// rerunnable (backends that get a rerun command; unset: all), dumps, started_at, seconds.
using RunRecord = reports::RunRecord;
using reports::assemble_report;
// "deltacheck run --backend B --case 'ID'" plus backend options, quoted for a POSIX shell; the
// quoting; the time now as UTC ISO 8601; this process's command line, shell-quoted.
using reports::rerun_command;
using reports::shell_quote;
using reports::this_command_line;
using reports::utc_now_iso8601;

// The formats, each a pure function of the report.
using reports::format_html;
using reports::format_json;
using reports::format_junit;
using reports::format_markdown;

// Writes report.json, junit.xml, summary.md and report.html into `dir` (created if needed), each
// atomically (temporary file, then rename). Failure dumps are the tool's (--report-dir).
Status write_report(const Report& report, const std::string& dir);
// The same with failure dumps, as `deltacheck run --report-dir` writes it: open(dir) (checks
// dir/failures), dump_path(name, &path) for each dump, then commit(report), which swaps the
// whole set in (WrittenReport: status, files with their sizes, seconds); nothing changes in the
// directory before commit, and an uncommitted writer leaves no trace.
using ReportDirWriter = reports::ReportDirWriter;
using WrittenReport = reports::WrittenReport;
// A failure dump (HDF5: the case as a golden fixture plus what the backend wrote, the baseline,
// verdict, message and rerun command): its file name per (case, backend), and the writer (from a
// FailureCallback's arguments; atomic, safe from several threads).
using reports::dump_file_name;
using reports::write_failure_dump;
// A report entry's dump resolved inside its report folder ("" when the file is gone;
// InvalidArgument for anything but failures/<dump name>).
using reports::find_dump;
// GitHub Actions' job summary: summary.md appended to $GITHUB_STEP_SUMMARY (StepSummary: status,
// path; path "" when the variable is unset).
using StepSummary = reports::StepSummary;
using reports::append_step_summary;

// Reads a report.json (or a report directory) back, e.g. to merge shards with
// reports::merge_reports or `deltacheck report merge`.
using LoadedReport = reports::LoadedReport;
using reports::read_report;
// Merges reports (shards of one run, or runs of other backends) into one (MergedReport: status,
// report); refuses reports of other builds or tolerance policies, a result twice, and an
// incomplete set of shards.
using MergedReport = reports::MergedReport;
using reports::merge_reports;

}  // namespace deltacheck
