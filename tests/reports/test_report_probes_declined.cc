// A pass whose every leak probe the backend declined is shown as such in every format (issue 35,
// E5): the console row and totals, report.json's totals, JUnit's test output, the Markdown and
// HTML totals and the HTML row; a pass with its probes shows nothing of the kind.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/console.h"
#include "reports/report.h"

namespace deltacheck::reports {
namespace {

using harness::CaseResult;
using harness::Verdict;

CaseResult pass(const std::string& id, const std::string& backend, Verdict probe_verdict) {
  CaseResult r;
  r.case_id = id;
  r.op = "gdr";
  r.backend = backend;
  r.verdict = Verdict::kPass;
  for (const char* p : {"repeat", "isolation", "alone", "order"})
    r.probes.push_back({p, probe_verdict,
                        probe_verdict == Verdict::kSkipped ? "the backend declined it: no" : ""});
  return r;
}

const std::string kA = "gdr(layout=packed[3,4],K=8,V=8,seed=1)";
const std::string kB = "gdr(layout=packed[5,6],K=8,V=8,seed=2)";

Report report() {
  RunRecord run;
  run.fail_on = default_fail_on();
  run.selected = 2;
  run.index_of = {{kA, 0}, {kB, 1}};
  return assemble_report({pass(kA, "cand", Verdict::kSkipped), pass(kB, "cand", Verdict::kPass)},
                         run);
}

const char* kLine =
    "1 pass without its leak probes: the backend declined every one (--deterministic or "
    "--batch-invariant make such a case an error)";

TEST(ProbesDeclinedReport, EveryFormatShowsThePassWithoutItsProbes) {
  const Report r = report();
  std::vector<CaseResult> results;
  for (const Entry& e : r.entries) results.push_back(e.result);
  const std::string row = format_result_line(results[0], {});
  EXPECT_NE(row.find(kA + " (probes declined: repeat, isolation, alone, order)"), std::string::npos)
      << row;
  EXPECT_EQ(format_result_line(results[1], {}).find("probes declined"), std::string::npos);
  const std::string summary = format_summary(results, 1.0, {});
  EXPECT_NE(summary.find("2 pass (1 without probes)"), std::string::npos) << summary;
  EXPECT_NE(summary.find(kLine), std::string::npos) << summary;

  const nlohmann::json j = nlohmann::json::parse(format_json(r));
  EXPECT_EQ(j["totals"]["cand"]["pass"], 2);
  EXPECT_EQ(j["totals"]["cand"]["pass_without_probes"], 1);
  // report.json reads back to the same report (report merge re-renders from it).
  const LoadedReport back = parse_json(format_json(r), "report.json");
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(format_json(back.report), format_json(r));

  const std::string junit = format_junit(r);
  EXPECT_NE(junit.find("<system-out>pass (probes declined: repeat, isolation, alone, order)"),
            std::string::npos)
      << junit;
  const std::string md = format_markdown(r);
  EXPECT_NE(md.find("2 pass (1 without probes)"), std::string::npos) << md;
  EXPECT_NE(md.find(kLine), std::string::npos) << md;
  const std::string html = format_html(r);
  EXPECT_NE(html.find(kLine), std::string::npos);
  EXPECT_NE(html.find("pass (probes declined: repeat, isolation, alone, order)"),
            std::string::npos);
}

TEST(ProbesDeclinedReport, PassesWithTheirProbesShowNothing) {
  RunRecord run;
  run.fail_on = default_fail_on();
  const Report r = assemble_report({pass(kB, "cpu", Verdict::kPass)}, run);
  EXPECT_EQ(format_markdown(r).find("without"), std::string::npos);
  EXPECT_EQ(format_junit(r).find("system-out"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(format_json(r))["totals"]["cpu"].count("pass_without_probes"),
            0u);
}

}  // namespace
}  // namespace deltacheck::reports
