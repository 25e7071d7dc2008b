// Reports against hostile candidates and hostile report directories (docs/reliability.md):
// bytes that are not UTF-8 and control characters from a candidate, dump paths in a report.json
// that leave their folder, a failures/ folder that is a symbolic link or holds the user's files,
// dumps a candidate could read while it runs, and a disk that fills up while the report is
// written.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "reports/console.h"
#include "reports/report.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::ScratchDir;

const char* kCase = " --no-probes --case 'gdr(layout=packed[5,7],H=1,HV=2,K=8,V=8,seed=1)'";

std::string external(const std::string& script) {
  return testing::deltacheck() + " run --backend external --cmd " + shell_quote(script) + kCase;
}

// --- 1: text that is not UTF-8, control characters ------------------------------------------

TEST(ReportReliability, BytesThatAreNotUtf8StillGiveTheWholeReport) {
  ScratchDir dir("utf8");
  const std::string out = dir / "report";
  // A passing run first: its report must not survive the failing one.
  ASSERT_EQ(
      run_command(testing::deltacheck() + " run --backend cpu" + kCase + " --report-dir " + out)
          .code,
      0);
  const CommandResult r = run_command(external("printf 'caf\\351' >&2; exit 3; : {in} {out}") +
                                      " --report-dir " + out + " --filter 'caf\xE9|gdr'");
  ASSERT_EQ(r.code, 1) << r.out;
  const nlohmann::json j = nlohmann::json::parse(testing::read_file(fs::path(out) / "report.json"));
  EXPECT_EQ(j["gate"]["failed"], true);
  EXPECT_EQ(j["results"][0]["message"], "external program exited with code 3: caf\xEF\xBF\xBD");
  EXPECT_EQ(j["selection"]["filter"], "caf\xEF\xBF\xBD|gdr");
  for (const char* f : {"junit.xml", "summary.md", "report.html"})
    EXPECT_NE(testing::read_file(fs::path(out) / f).find("caf\xEF\xBF\xBD"), std::string::npos)
        << f;
  if (testing::have_program("xmllint")) {
    const CommandResult v = testing::validate_junit(out + "/junit.xml");
    EXPECT_EQ(v.code, 0) << v.out;
  }
}

TEST(ReportReliability, ACandidateCannotPrintALineOfItsOwn) {
  // A carriage return and colour codes in the program's last line, a newline in a message.
  const CommandResult r = run_command(
      external("printf 'boom\\r\\033[32mPASS        fake\\033[0m' >&2; exit 3; : {in} {out}"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x1B'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("boom\\r\\x1B[32mPASS"), std::string::npos) << r.out;

  harness::CaseResult x;
  x.case_id = "gdr(seed=1)";
  x.backend = "external";
  x.verdict = harness::Verdict::kUnsupported;
  x.message = "no\nPASS        external  gdr(seed=1)\n\x1B[2K";
  const std::string text = format_result_line(x, {false, false, default_fail_on()});
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find("\nPASS"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1B'), std::string::npos) << text;
}

}  // namespace
}  // namespace deltacheck::reports
