// Text shared by the report formats: the one-line failure headline (JUnit's failure message, the
// Markdown and HTML failure rows) and the multi-line details of a result.
#pragma once

#include <string>
#include <vector>

#include "reports/report.h"

namespace deltacheck::reports {

// pass, fail, leak, error, unsupported, skipped: the column order of every table.
const std::vector<harness::Verdict>& verdict_order();

// "rel_rms 3.1e-02 > 5.0e-03 in o (seq 1 from token 0)" for fail and leak, computed from the
// metrics; the result's message for everything else (errors, unsupported, probe findings).
std::string failure_headline(const harness::CaseResult& r);

// Verdict, message, per-tensor and per-sequence metrics against thresholds, probes, seed, rerun
// command and dump: what a developer reads first (JUnit system-out).
std::string result_details(const Entry& e);

// "1.8e-01" (non-finite values as nan / inf).
std::string sci(double x);

}  // namespace deltacheck::reports
