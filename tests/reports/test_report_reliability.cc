// Reports against hostile candidates and hostile report directories (docs/reliability.md):
// bytes that are not UTF-8 and control characters from a candidate, dump paths in a report.json
// that leave their folder, a failures/ folder that is a symbolic link or holds the user's files,
// dumps a candidate could read while it runs, and a disk that fills up while the report is
// written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <map>
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

// --- 2: dump paths in a report.json ----------------------------------------------------------

// A report directory with one failing result and its dump.
std::string failing_report(const ScratchDir& dir, const std::string& name) {
  const std::string out = dir / name;
  const CommandResult r =
      run_command(testing::deltacheck() + " run --backend wrong:ignore-cu-seqlens" + kCase +
                  " -q --report-dir " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  return out;
}

void set_dump(const std::string& report_dir, const std::string& dump) {
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(testing::read_file(fs::path(report_dir) / "report.json"));
  for (auto& e : j["results"]) e["dump"] = dump;
  testing::write_file(fs::path(report_dir) / "report.json", j.dump(1));
}

TEST(ReportReliability, MergeCopiesOnlyDumpsInsideTheReportsFolder) {
  ScratchDir dir("merge_paths");
  const std::string in = failing_report(dir, "deep/er/in");
  fs::create_directories(dir.path() / "out");
  testing::write_file(dir.path() / "pwned.txt", "mine");
  // A path climbing out of the report, with -o's failures/ a link that would lead it further.
  set_dump(in, "failures/../../../pwned.txt");
  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "out/failures");
  CommandResult r =
      run_command(testing::deltacheck() + " report merge " + in + " -o " + (dir / "out"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("names dump 'failures/../../../pwned.txt', which is not a file in the "
                       "report's failures/ folder"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(testing::read_file(dir.path() / "pwned.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir.path() / "deep/pwned.txt"));
  EXPECT_FALSE(fs::exists(dir.path() / "out/report.json"));
  // A dump name that is a link out of the report.
  fs::remove(dir.path() / "out/failures");
  const std::string name = "gdr-x-0123456789abcdef.h5";
  fs::create_symlink(dir.path() / "pwned.txt", fs::path(in) / "failures" / name);
  set_dump(in, "failures/" + name);
  r = run_command(testing::deltacheck() + " report merge " + in + " -o " + (dir / "out"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("outside the report's folder"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() / ("out/failures/" + name)));
}

// --- 3: failures/ is deltacheck's ------------------------------------------------------------

TEST(ReportReliability, AFailuresFolderThatIsALinkOrHoldsUserFilesIsNeverEmptied) {
  ScratchDir dir("failures_link");
  const std::string out = dir / "report";
  fs::create_directories(dir.path() / "elsewhere");
  fs::create_directories(out);
  testing::write_file(dir.path() / "elsewhere/precious.h5", "x");
  fs::create_directory_symlink(dir.path() / "elsewhere", fs::path(out) / "failures");
  const std::string pass =
      testing::deltacheck() + " run --backend cpu" + kCase + " -q --report-dir ";
  CommandResult r = run_command(pass + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("failures is a symbolic link"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path() / "elsewhere/precious.h5"));
  EXPECT_TRUE(fs::is_symlink(fs::path(out) / "failures"));
  // A real folder with a file the user put there.
  fs::remove(fs::path(out) / "failures");
  fs::create_directories(fs::path(out) / "failures");
  testing::write_file(fs::path(out) / "failures/mine.h5", "x");
  r = run_command(pass + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("holds 'mine.h5', which deltacheck did not write"), std::string::npos)
      << r.out;
  EXPECT_TRUE(fs::exists(fs::path(out) / "failures/mine.h5"));
  // deltacheck's own folder is replaced: by a new run's dumps, then by none.
  fs::remove_all(fs::path(out) / "failures");
  failing_report(dir, "report");
  ASSERT_EQ(std::distance(fs::directory_iterator(fs::path(out) / "failures"), {}), 1);
  EXPECT_EQ(run_command(pass + out).code, 0);
  EXPECT_FALSE(fs::exists(fs::path(out) / "failures"));
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left behind: " << e.path();
}

// --- 4: a full disk ---------------------------------------------------------------------------

TEST(ReportReliability, AFullDiskLeavesThePreviousReportSetWhole) {
  ScratchDir dir("full_disk");
  const std::string out = failing_report(dir, "report");
  std::map<std::string, std::string> before;
  for (const char* f : {"report.json", "junit.xml", "summary.md", "report.html"})
    before[f] = testing::read_file(fs::path(out) / f);
  // Files over 12 kB (24 blocks of /bin/sh) cannot be written (SIGXFSZ ignored: a write fails
  // with EFBIG, as on a full disk): report.html and the failure dump fail, the three small files
  // would not.
  const CommandResult r =
      run_command("true; trap '' XFSZ; ulimit -f 24; " + testing::deltacheck() +
                  " run --backend wrong:ignore-cu-seqlens --no-probes -q --report-dir " + out +
                  " --case 'gdr(layout=packed[9,0,7],H=2,HV=4,K=32,V=32,seed=5)'");
  EXPECT_EQ(r.code, 2) << r.out;  // not a crash (139)
  EXPECT_NE(r.out.find("deltacheck: error: cannot write " + out +
                       "/report.html (nothing replaced): File too large"),
            std::string::npos)
      << r.out;
  for (const auto& [f, text] : before)
    EXPECT_EQ(testing::read_file(fs::path(out) / f), text) << f << " changed";
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(out) / "failures"), {}), 1);
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left behind: " << e.path();
}

// --- 9: dumps a candidate could read ----------------------------------------------------------

TEST(ReportReliability, NoDumpExistsWhileACandidateRunsTheCase) {
  // Another backend fails the case first; its dump holds the expected outputs. The candidate
  // looks for dumps anywhere in the report directory while it runs the same case.
  ScratchDir dir("dump_timing");
  const std::string out = dir / "report", seen = dir / "seen.txt";
  const CommandResult r = run_command(
      testing::deltacheck() + " run --backend wrong:ignore-cu-seqlens,external -q --cmd " +
      shell_quote("find " + out + " -name '*.h5' >> " + seen + "; exit 3; : {in} {out}") + kCase +
      " --report-dir " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(testing::read_file(seen), "") << "a dump existed while the candidate ran";
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(out) / "failures"), {}), 1);
}

// --- 10: leftovers of killed runs -------------------------------------------------------------

TEST(ReportReliability, StagingFoldersOfDeadRunsAreRemovedLiveOnesKept) {
  ScratchDir dir("staging");
  const fs::path out = dir.path() / "report";
  fs::create_directories(out / ".deltacheck-staging-dead01/failures");
  fs::create_directories(out / ".deltacheck-staging-live01");
  fs::create_directories(out / ".failures.partial-4194305");  // pid beyond the default pid_max
  testing::write_file(out / ".failures.partial-4194305/gdr-x-0123456789abcdef.h5", "x");
  // A live run holds its staging folder's lock.
  const int fd = ::open((out / ".deltacheck-staging-live01").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  EXPECT_EQ(run_command(testing::deltacheck() + " run --backend cpu -q" + kCase + " --report-dir " +
                        out.string())
                .code,
            0);
  ::close(fd);
  EXPECT_FALSE(fs::exists(out / ".deltacheck-staging-dead01"));
  EXPECT_FALSE(fs::exists(out / ".failures.partial-4194305"));
  EXPECT_TRUE(fs::exists(out / ".deltacheck-staging-live01"));
}

}  // namespace
}  // namespace deltacheck::reports
