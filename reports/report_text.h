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

// The case id without the parameters at their defaults ("gdr(layout=packed[63,0,65],HV=4,
// gate=strong,seed=7)"): still an id that --case takes. An id this build cannot parse stays whole.
std::string readable_case_id(const std::string& id);

// The reason a result is not a pass, one line each: its message, then the probes that did not
// pass and that the message does not already name (the console's second lines, JUnit's failure
// body). A pass has only the lines of probes that did not pass (e.g. one that was skipped).
std::vector<std::string> reason_lines(const harness::CaseResult& r);

// Verdict, message, per-tensor and per-sequence metrics against thresholds, probes, seed, rerun
// command and dump: what a developer reads first (JUnit system-out).
std::string result_details(const Entry& e);

// The verdict as the reports print it: its name, and for a pass whose every leak probe the
// backend declined, "pass (probes declined: repeat, isolation, alone, order)".
std::string verdict_text(const harness::CaseResult& r);
// The passes among `results` whose probes were all declined (harness::declined_probes), and the
// line the totals of every format print for them ("" when none).
int passes_without_probes(const std::vector<harness::CaseResult>& results);
std::string passes_without_probes_line(int n);

// "1.8e-01" (non-finite values as nan / inf).
std::string sci(double x);
// The rounding-bias sign test of a tensor or sequence in a few words ("99% toward zero, z 90"),
// "" where it was not checked (outputs not stored in bf16 / fp16).
std::string bias_text(const harness::RoundingBias& b);

}  // namespace deltacheck::reports
