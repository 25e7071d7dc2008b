// Pinned verdicts and report diffs through the public API: a pin holds or flips in either
// direction, a regex pin covers what no case pin names, a bad pins line names FILE:LINE; a diff
// finds verdict changes and passes whose margin grew by the factor, and nothing between a report
// and itself.
#include <gtest/gtest.h>

#include "deltacheck/pins.h"

namespace deltacheck {
namespace {

CaseResult result(const std::string& id, const std::string& backend, Verdict v, double margin) {
  CaseResult r;
  r.case_id = parse_case(id).id();
  r.backend = backend;
  r.verdict = v;
  r.margin = margin;
  return r;
}

const char* kA = "gdr(layout=packed[3,5],seed=1)";
const char* kB = "gdr(layout=single[9],seed=2)";

TEST(Pins, HoldAndFlipEitherWay) {
  const std::vector<CaseResult> run{result(kA, "wrong:x", Verdict::kLeak, 9),
                                    result(kB, "wrong:x", Verdict::kPass, 0.1)};
  StatusOr<std::vector<Pin>> pins = parse_pins(format_pins(run), "p");
  ASSERT_TRUE(pins.ok()) << pins.status().message();
  PinCheck same = check_pins(pins.value(), run);
  EXPECT_TRUE(same.ok());
  EXPECT_EQ(same.held, 2);
  // The known leak now passes: a flip too (xfail strict).
  std::vector<CaseResult> fixed = run;
  fixed[0].verdict = Verdict::kPass;
  PinCheck f = check_pins(pins.value(), fixed);
  ASSERT_EQ(f.flips.size(), 1u);
  EXPECT_EQ(f.flips[0].pin.verdict, Verdict::kLeak);
  EXPECT_NE(format_pin_check(f, "p").find("FLIP  wrong:x  leak -> pass"), std::string::npos);
  std::vector<CaseResult> broke = run;
  broke[1].verdict = Verdict::kFail;
  EXPECT_FALSE(check_pins(pins.value(), broke).ok());
}

TEST(Pins, RegexPinsAndCasePinsFirst) {
  // The spelling of a pinned id need not be canonical: it is read as a case id.
  StatusOr<std::vector<Pin>> pins = parse_pins(
      "* leak re:layout=packed  # every pack leaks\n"
      "wrong:x pass gdr(seed=1,layout=packed[3,5])\n",
      "p");
  ASSERT_TRUE(pins.ok()) << pins.status().message();
  const std::vector<CaseResult> run{
      result(kA, "wrong:x", Verdict::kPass, 0),
      result("gdr(layout=packed[2,2],seed=4)", "wrong:y", Verdict::kLeak, 0),
      result(kB, "wrong:x", Verdict::kFail, 2)};
  const PinCheck c = check_pins(pins.value(), run);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.held, 2);
  ASSERT_EQ(c.unpinned.size(), 1u);
  EXPECT_EQ(c.unpinned[0]->case_id, run[2].case_id);
}

TEST(Pins, BadLinesNameTheirPlace) {
  for (const char* bad : {"wrong:x leak\n", "wrong:x leaky gdr(seed=1)\n",
                          "wrong:x leak gdr(nope=1)\n", "wrong:x leak re:(\n"}) {
    StatusOr<std::vector<Pin>> p = parse_pins(std::string("# ok\n") + bad, "known.pins");
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().message().rfind("known.pins:2: ", 0), 0u) << p.status().message();
  }
}

Report report_of(const std::vector<CaseResult>& rs) { return make_report(rs); }

TEST(ReportDiff, VerdictChangesAndGrownMargins) {
  const Report old_r =
      report_of({result(kA, "k", Verdict::kPass, 0.1), result(kB, "k", Verdict::kPass, 0.02)});
  const Report new_r =
      report_of({result(kA, "k", Verdict::kPass, 0.15), result(kB, "k", Verdict::kPass, 0.12)});
  DiffOptions o;
  o.margin_factor = 5;
  ReportDiff d = diff_reports(old_r, new_r, o);
  EXPECT_TRUE(d.verdict_changes.empty());
  ASSERT_EQ(d.margin_growth.size(), 1u);  // 0.02 -> 0.12 is 6x; 0.1 -> 0.15 is not 5x
  EXPECT_EQ(d.margin_growth[0].case_id, parse_case(kB).id());
  EXPECT_TRUE(d.drifted());
  const Report failed =
      report_of({result(kA, "k", Verdict::kLeak, 9), result(kB, "k", Verdict::kPass, 0.02)});
  d = diff_reports(old_r, failed, o);
  ASSERT_EQ(d.verdict_changes.size(), 1u);
  EXPECT_EQ(d.verdict_changes[0].new_verdict, Verdict::kLeak);
  EXPECT_NE(format_diff_markdown(d, "old", "new").find("| pass → **leak** |"), std::string::npos);
  EXPECT_NE(format_diff_text(d, "old", "new").find("DRIFTED"), std::string::npos);
  EXPECT_FALSE(diff_reports(old_r, old_r, o).drifted());
}

}  // namespace
}  // namespace deltacheck
