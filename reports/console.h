// The console report: one line per (case, backend) with verdict, worst metric against its
// threshold and leak details, then totals per backend and a final summary line.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "harness/result.h"

namespace deltacheck::reports {

struct ConsoleOptions {
  bool color = false;
  bool only_failures = false;  // print passing rows too when false
  // Verdicts that fail the run (--fail-on): the summary says FAILED when any result has one.
  std::vector<harness::Verdict> fail_on{harness::Verdict::kFail, harness::Verdict::kLeak,
                                        harness::Verdict::kError};
};

// One result line (plus an indented detail line for anything that is not a pass).
std::string format_result_line(const harness::CaseResult& r, const ConsoleOptions& o);
// Totals per backend and verdict, the failing case ids as a filter to paste, and the summary.
std::string format_summary(const std::vector<harness::CaseResult>& results, double seconds,
                           const ConsoleOptions& o);

}  // namespace deltacheck::reports
