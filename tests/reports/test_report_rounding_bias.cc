// The rounding-bias check in the reports (docs/reports.md, docs/tolerance.md#rounding-bias): a
// truncating backend's run says why it fails on the console, report.json holds the check per
// tensor and sequence and round-trips it, a report written before the check reads as unchecked,
// and the HTML tables show the error signs.
#include <gtest/gtest.h>

#include <regex>

#include "reports/report.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

using testing::ScratchDir;

TEST(ReportRoundingBias, ATruncatingBackendFailsWithItsReasonInEveryFormat) {
  ScratchDir dir("sign_test");  // (its path is in the report: no "rounding_bias" in it)
  const testing::CommandResult run = testing::run_command(
      testing::deltacheck() +
      " run --backend cpu,wrong:truncated-store --no-probes --progress lines --case "
      "'gdr(layout=single[129],dtype=bf16,gate=zero,seed=92)' --report-dir " +
      dir / "r");
  EXPECT_EQ(run.code, 1) << run.out;
  EXPECT_NE(run.out.find("bf16 o biased toward zero: 100% of 16512 elements shrink (z = 16 over "
                         "258 rows); truncation instead of round-to-nearest?"),
            std::string::npos)
      << run.out;

  const std::string text = testing::read_file(dir.path() / "r" / "report.json");
  const LoadedReport back = parse_json(text, "report.json");
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(format_json(back.report), text);
  ASSERT_EQ(back.report.entries.size(), 2u);
  for (const Entry& e : back.report.entries) {
    const harness::TensorReport& o = e.result.tensors.at(0);
    ASSERT_EQ(o.name, "o");
    EXPECT_TRUE(o.bias.checked);
    EXPECT_EQ(o.bias.biased, e.result.backend == "wrong:truncated-store") << e.result.backend;
    EXPECT_EQ(o.bias.rows, 258);
    ASSERT_EQ(o.seqs.size(), 1u);
    EXPECT_EQ(o.seqs[0].bias.biased, o.bias.biased);
    // The fp32 state is not checked.
    EXPECT_FALSE(e.result.tensors.at(1).bias.checked) << e.result.tensors.at(1).name;
  }
  const harness::RoundingBias& b = back.report.entries[1].result.tensors[0].bias;
  EXPECT_EQ(b.direction, harness::BiasDirection::kTowardZero);
  EXPECT_GT(b.fraction, 0.99);

  // Before the check, reports had no rounding_bias: they read as unchecked, not as a failure.
  std::string old = text;
  for (size_t at; (at = old.find(",\"rounding_bias\":{")) != std::string::npos;)
    old.erase(at, old.find('}', at) - at + 1);
  ASSERT_EQ(old.find("rounding_bias"), std::string::npos);
  const LoadedReport before = parse_json(old, "old report.json");
  ASSERT_TRUE(before.status.ok()) << before.status.message();
  EXPECT_FALSE(before.report.entries[1].result.tensors[0].bias.checked);

  const std::string html = testing::read_file(dir.path() / "r" / "report.html");
  EXPECT_NE(html.find("<th>error signs</th>"), std::string::npos);
  EXPECT_TRUE(std::regex_search(html, std::regex("100% toward zero, z 16\\.[0-9] \\(biased\\)")));
}

}  // namespace
}  // namespace deltacheck::reports
