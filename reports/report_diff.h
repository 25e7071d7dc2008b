// Drift between two reports (`deltacheck report diff OLD NEW`): the results whose verdict changed,
// and the passing results whose margin (largest error / threshold ratio) grew by a chosen factor —
// a kernel change that made a case five times less precise while it still passes. Results are
// matched by (case id, backend); ones in only one report are listed as added or gone.
#pragma once

#include <string>
#include <vector>

#include "reports/report.h"

namespace deltacheck::reports {

struct DiffOptions {
  double margin_factor = 2.0;  // a pass whose margin grew by at least this factor is drift
  double min_margin = 0.0;     // ... and whose new margin is at least this (ignore noise near 0)
};

struct DiffRow {
  std::string case_id, backend;
  harness::Verdict old_verdict = harness::Verdict::kPass, new_verdict = harness::Verdict::kPass;
  double old_margin = 0.0, new_margin = 0.0;
  std::string message;  // the new result's reason (verdict changes)
};

struct ReportDiff {
  std::vector<DiffRow> verdict_changes, margin_growth;
  std::vector<DiffRow> added, gone;  // in NEW only / in OLD only
  int compared = 0;                  // results in both
  double margin_factor = 2.0;
  // Verdict changes or margins grown: what makes `report diff` exit 1.
  bool drifted() const { return !verdict_changes.empty() || !margin_growth.empty(); }
};

ReportDiff diff_reports(const Report& old_report, const Report& new_report,
                        const DiffOptions& options = {});
// As text (the console) and as Markdown (a CI job summary).
std::string format_diff_text(const ReportDiff& d, const std::string& old_name,
                             const std::string& new_name);
std::string format_diff_markdown(const ReportDiff& d, const std::string& old_name,
                                 const std::string& new_name);

}  // namespace deltacheck::reports
