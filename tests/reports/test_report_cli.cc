// The report features end to end through the deltacheck tool: --report-dir writes every format
// and a failure dump per failing case (a golden fixture plus the backend's outputs) and prints
// where the HTML page is; the printed rerun command reproduces the failure; --fail-on chooses the
// gate; --shard and GoogleTest's shard variables stripe the selection; `report merge` of the
// shards equals the unsharded report; and the page renders its plots in headless Chromium
// without console errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "reports/failure_dump.h"
#include "reports/report.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::ScratchDir;

// A few cases covering a leak (packed), a pass (single), a batch and an op the wrong backends do
// not implement (unsupported); each runs in milliseconds.
const char* kCases =
    " --case 'gdr(layout=packed[63,0,65],seed=10)' --case 'gdr(layout=packed[1*24,2*12],seed=16)'"
    " --case 'gdr(layout=single[65],seed=4)' --case 'gdr(layout=batch[3x64],seed=7)'"
    " --case 'mask(B=2,q=24,kv=0,offset=0,cache=none,causal=1,window=0,chunk=0,padding=left,"
    "packed=packed,format=bool,dtype=fp32,seed=1)'";

std::string run_line(const std::string& backends, const std::string& extra) {
  return testing::deltacheck() + " run --backend " + backends + kCases + " " + extra;
}

CommandResult run_cases(const std::string& backends, const std::string& extra) {
  return run_command(run_line(backends, extra));
}

// report.json without what legitimately differs between equivalent runs: provenance and timing.
nlohmann::json comparable(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(testing::read_file(path));
  j.erase("run");
  for (auto& r : j["results"]) r.erase("seconds");
  return j;
}

std::string without_times(std::string junit) {
  return std::regex_replace(junit, std::regex(" (time|timestamp)=\"[^\"]*\""), "");
}

// A serving scenario (ops/serve) is reported like any case: a row per backend in every format,
// its failure with the request, call and block named, and a failure dump that holds the case.
TEST(ReportCli, ServingScenariosAreReportedLikeCases) {
  ScratchDir dir("serve");
  const std::string out = dir / "report";
  const std::string id =
      "serve(requests=6,lanes=3,prompt=40,block=16,spec=3,steps=8,accept=rand,prefix=none,"
      "contract=plain,H=1,"
      "HV=2,K=32,V=32,dtype=fp32,gate=weak,seed=9)";
  const CommandResult r =
      run_command(testing::deltacheck() + " run --backend cpu,wrong:serve-no-reset --case '" + id +
                  "' --report-dir " + out);
  ASSERT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(testing::validate_junit(out + "/junit.xml").code, 0);
  const LoadedReport lr = read_report(out);
  ASSERT_TRUE(lr.status.ok()) << lr.status.message();
  ASSERT_EQ(lr.report.entries.size(), 2u);
  for (const Entry& e : lr.report.entries) {
    EXPECT_EQ(e.result.case_id, id);
    EXPECT_EQ(e.result.seq_lengths.size(), 6u);
    if (e.result.backend == "cpu") {
      EXPECT_EQ(e.result.verdict, harness::Verdict::kPass) << e.result.message;
      continue;
    }
    EXPECT_EQ(e.result.verdict, harness::Verdict::kFail);
    EXPECT_NE(e.result.message.find("(request "), std::string::npos) << e.result.message;
    EXPECT_NE(e.result.message.find(", call "), std::string::npos) << e.result.message;
    ASSERT_FALSE(e.dump.empty());
    const FailureDump d = read_failure_dump(out + "/" + e.dump);
    ASSERT_TRUE(d.status.ok()) << d.status.message();
    EXPECT_EQ(d.fixture->c.id(), id);
  }
  for (const char* f : {"junit.xml", "summary.md", "report.html"})
    EXPECT_NE(testing::read_file(out + "/" + f).find("serve(requests=6"), std::string::npos) << f;
}

TEST(ReportCli, ReportDirHoldsEveryFormatAndAFailureDumpPerFailingCase) {
  ScratchDir dir("formats");
  const std::string out = dir / "report";
  const CommandResult r = run_cases("cpu,wrong:ignore-cu-seqlens", "--report-dir " + out);
  ASSERT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("report: " + out + "/report.html"), std::string::npos) << r.out;
  for (const char* f : {"report.json", "junit.xml", "summary.md", "report.html"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(out) / f)) << f;
  const auto valid = testing::validate_junit(out + "/junit.xml");
  EXPECT_EQ(valid.code, 0) << valid.out;

  const LoadedReport lr = read_report(out);
  ASSERT_TRUE(lr.status.ok()) << lr.status.message();
  const Report& rep = lr.report;
  EXPECT_EQ(rep.selected_cases, 5);
  EXPECT_EQ(rep.entries.size(), 10u);
  EXPECT_EQ(rep.machines.size(), 1u);
  EXPECT_FALSE(rep.git_revision.empty());
  int leaks = 0;
  for (const Entry& e : rep.entries) {
    if (e.result.verdict != harness::Verdict::kLeak) continue;
    ++leaks;
    // Each failure has its dump and rerun command, and the dump holds the case.
    ASSERT_FALSE(e.dump.empty()) << e.result.case_id;
    EXPECT_NE(r.out.find("dump: " + out + "/" + e.dump), std::string::npos);
    const FailureDump d = read_failure_dump(out + "/" + e.dump);
    ASSERT_TRUE(d.status.ok()) << d.status.message();
    EXPECT_EQ(d.fixture->c.id(), e.result.case_id);
    EXPECT_EQ(d.backend, "wrong:ignore-cu-seqlens");
    EXPECT_EQ(d.verdict, "leak");
    EXPECT_EQ(d.rerun, e.rerun);
    EXPECT_TRUE(d.fixture->inputs.has("cu_seqlens") || d.fixture->inputs.has("q"));
    const auto& actual = d.actual.at("o");
    const auto& expected = d.fixture->expected.at("o");
    ASSERT_EQ(actual.size(), expected.size());
    double worst = 0;
    for (size_t i = 0; i < actual.size(); ++i)
      worst = std::max(worst, std::abs(actual[i] - expected[i]));
    EXPECT_NEAR(worst, e.result.tensors.at(0).metrics.max_abs, 1e-12);
    EXPECT_EQ(d.baseline.at("o").size(), expected.size());
  }
  EXPECT_GE(leaks, 2);
  size_t dumps = 0;
  for (const auto& f : fs::directory_iterator(out + "/failures"))
    dumps += f.path().extension() == ".h5";
  EXPECT_EQ(dumps, static_cast<size_t>(leaks));
  for (const auto& f : fs::directory_iterator(out))
    EXPECT_NE(f.path().filename().string()[0], '.') << "left behind: " << f.path();

  // The rerun command reproduces exactly that case.
  const Entry* leak = nullptr;
  for (const Entry& e : rep.entries)
    if (e.result.verdict == harness::Verdict::kLeak) leak = &e;
  ASSERT_NE(leak, nullptr);
  ASSERT_EQ(leak->rerun.rfind("deltacheck ", 0), 0u);
  const CommandResult again =
      run_command(testing::deltacheck() + leak->rerun.substr(std::string("deltacheck").size()));
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.out.find("LEAK"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("1 cases x 1 backends"), std::string::npos) << again.out;

  // A dump is a golden fixture of its case: `golden verify` judges backends on it again.
  const std::string dump = out + "/" + leak->dump;
  EXPECT_EQ(run_command(testing::deltacheck() + " golden verify " + dump +
                        " --backend wrong:ignore-cu-seqlens -q")
                .code,
            1);
  EXPECT_EQ(
      run_command(testing::deltacheck() + " golden verify " + dump + " --backend cpu -q").code, 0);

  // A second run into the same directory replaces the dumps instead of mixing two runs.
  ASSERT_EQ(run_cases("cpu", "--report-dir " + out).code, 0);
  EXPECT_FALSE(fs::exists(out + "/failures"));
}

TEST(ReportCli, FailOnChoosesWhichVerdictsFailTheRun) {
  ScratchDir dir("failon");
  EXPECT_EQ(run_cases("wrong:ignore-cu-seqlens", "-q").code, 1);
  const CommandResult lenient =
      run_cases("wrong:ignore-cu-seqlens", "-q --fail-on fail,error --report-dir " + (dir / "r"));
  EXPECT_EQ(lenient.code, 0) << lenient.out;
  EXPECT_NE(lenient.out.find("— OK"), std::string::npos) << lenient.out;
  const auto j = nlohmann::json::parse(testing::read_file(dir / "r/report.json"));
  EXPECT_EQ(j["gate"]["failed"], false);
  EXPECT_EQ(j["gate"]["fail_on"], nlohmann::json::array({"fail", "error"}));
  // unsupported can be made to fail the gate (an op the backend does not implement).
  EXPECT_EQ(run_cases("wrong:ignore-cu-seqlens", "-q --fail-on unsupported").code, 1);
  const CommandResult bad = run_cases("cpu", "--fail-on fail,flaky --report-dir " + (dir / "bad"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("deltacheck: error: --fail-on: unknown verdict 'flaky'"),
            std::string::npos)
      << bad.out;
  EXPECT_FALSE(fs::exists(dir / "bad")) << "a usage error must not create output";
}

TEST(ReportCli, ShardsStripeTheSelectionAndHonorGoogleTestVariables) {
  const std::string list = testing::deltacheck() + " list cases --suite smoke";
  const CommandResult all = run_command(list);
  ASSERT_EQ(all.code, 0);
  std::vector<std::string> ids;
  std::istringstream in(all.out);
  for (std::string line; std::getline(in, line);) ids.push_back(line);
  ASSERT_GE(ids.size(), 6u);
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    const CommandResult s = run_command(list + " --shard " + std::to_string(i) + "/4");
    ASSERT_EQ(s.code, 0) << s.out;
    std::string expected;
    for (size_t k = i; k < ids.size(); k += 4) expected += ids[k] + "\n";
    EXPECT_EQ(s.out, expected) << "shard " << i;
    std::istringstream lines(s.out);
    for (std::string line; std::getline(lines, line);) EXPECT_TRUE(seen.insert(line).second);
    // GoogleTest's variables select the same shard.
    const CommandResult env =
        run_command("env GTEST_SHARD_INDEX=" + std::to_string(i) + " GTEST_TOTAL_SHARDS=4 " + list);
    EXPECT_EQ(env.out, s.out);
  }
  EXPECT_EQ(seen.size(), ids.size());
  for (const char* bad : {"4/4", "1/0", "-1/2", "x/2", "1"}) {
    const CommandResult s = run_command(list + " --shard " + bad);
    EXPECT_EQ(s.code, 2) << bad;
    EXPECT_NE(s.out.find("deltacheck: error: --shard"), std::string::npos) << s.out;
  }
}

// GitHub Actions' job summary: a run with --report-dir appends its summary.md to the file
// $GITHUB_STEP_SUMMARY names; one it cannot write to is a warning, not a changed verdict.
TEST(ReportCli, RunAppendsItsSummaryToTheGithubStepSummary) {
  ScratchDir dir("step_summary");
  const std::string step = dir / "step.md";
  const CommandResult r =
      run_command("env GITHUB_STEP_SUMMARY=" + step + " " +
                  run_line("wrong:ignore-cu-seqlens", "-q --report-dir " + (dir / "report")));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("job summary: appended to " + step), std::string::npos) << r.out;
  EXPECT_EQ(testing::read_file(step), testing::read_file(dir / "report/summary.md") + "\n");
  const CommandResult bad =
      run_command("env GITHUB_STEP_SUMMARY=" + (dir / "report") + " " +
                  run_line("wrong:ignore-cu-seqlens", "-q --report-dir " + (dir / "again")));
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("deltacheck: warning: cannot append the job summary"), std::string::npos)
      << bad.out;
}

TEST(ReportCli, MergedShardReportsEqualTheUnshardedReport) {
  ScratchDir dir("merge");
  const std::string backends = "cpu,wrong:ignore-cu-seqlens,wrong:readout-before-update";
  ASSERT_EQ(run_cases(backends, "-q --report-dir " + (dir / "all")).code, 1);
  std::string shards;
  for (int i = 0; i < 3; ++i) {
    const std::string d = dir / ("shard" + std::to_string(i));
    // Shard 2 by GoogleTest's variables, the others by --shard.
    const std::string how = i == 2 ? "" : " --shard " + std::to_string(i) + "/3";
    const std::string env = i == 2 ? "env GTEST_SHARD_INDEX=2 GTEST_TOTAL_SHARDS=3 " : "";
    const CommandResult s = run_command(env + run_line(backends, "-q --report-dir " + d + how));
    EXPECT_EQ(s.code, 1) << s.out;
    shards += " " + d;
  }
  const CommandResult m =
      run_command(testing::deltacheck() + " report merge" + shards + " -o " + (dir / "merged"));
  EXPECT_EQ(m.code, 1) << m.out;
  EXPECT_NE(m.out.find("report: " + (dir / "merged") + "/report.html"), std::string::npos);
  EXPECT_EQ(comparable(dir / "merged/report.json"), comparable(dir / "all/report.json"));
  EXPECT_EQ(without_times(testing::read_file(dir / "merged/junit.xml")),
            without_times(testing::read_file(dir / "all/junit.xml")));
  // With $GITHUB_STEP_SUMMARY set, the merge appends its summary.md there (the shards do not).
  const std::string step = dir / "step_summary.md";
  testing::write_file(step, "earlier step\n");
  const CommandResult shard =
      run_command("env GITHUB_STEP_SUMMARY=" + step + " " +
                  run_line(backends, "-q --report-dir " + (dir / "s") + " --shard 0/3"));
  EXPECT_EQ(testing::read_file(step), "earlier step\n") << shard.out;
  const CommandResult summed =
      run_command("env GITHUB_STEP_SUMMARY=" + step + " " + testing::deltacheck() +
                  " report merge" + shards + " -o " + (dir / "merged2"));
  EXPECT_EQ(summed.code, 1) << summed.out;
  EXPECT_NE(summed.out.find("job summary: appended to " + step), std::string::npos) << summed.out;
  EXPECT_EQ(testing::read_file(step),
            "earlier step\n" + testing::read_file(dir / "merged2/summary.md") + "\n");
  // The dumps came along.
  size_t dumps = 0;
  for (const auto& f : fs::directory_iterator(dir / "merged/failures"))
    dumps += f.is_regular_file();
  EXPECT_GT(dumps, 0u);
  // An incomplete set of shards is refused, and nothing is written.
  const CommandResult partial =
      run_command(testing::deltacheck() + " report merge " + (dir / "shard0") + " " +
                  (dir / "shard2") + " -o " + (dir / "partial"));
  EXPECT_EQ(partial.code, 2);
  EXPECT_NE(partial.out.find("shard 1/3 is missing"), std::string::npos) << partial.out;
  EXPECT_FALSE(fs::exists(dir / "partial"));
}

TEST(ReportCli, AnEmptyShardIsAnEmptyPassingRun) {
  ScratchDir dir("empty");
  const CommandResult r = run_command(testing::deltacheck() +
                                      " run --case 'gdr(layout=single[3],seed=1)' --shard 1/2 "
                                      "--report-dir " +
                                      (dir / "r"));
  EXPECT_EQ(r.code, 0) << r.out;
  const LoadedReport lr = read_report(dir / "r");
  ASSERT_TRUE(lr.status.ok()) << lr.status.message();
  EXPECT_TRUE(lr.report.entries.empty());
  EXPECT_EQ(lr.report.shard_count, 2);
}

// Chromium's console messages (errors, failed loads) arrive on stderr as lines with ":CONSOLE".
struct BrowserCheck {
  std::string dom;
  std::vector<std::string> console;
};

BrowserCheck open_in_chromium(const std::string& browser, const std::string& page,
                              const std::string& profile) {
  // No network at all: anything the page tried to fetch would fail with a console error.
  const CommandResult r = run_command(
      "timeout 60 " + browser +
      " --headless --disable-gpu --no-sandbox --no-first-run --user-data-dir=" + profile +
      " --host-resolver-rules='MAP * ~NOTFOUND' --enable-logging=stderr --v=0"
      " --virtual-time-budget=2000 --dump-dom 'file://" +
      page + "'");
  BrowserCheck b;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos) b.console.push_back(line);
    b.dom += line + "\n";
  }
  return b;
}

int attribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex(name + "=\"([0-9]+)\""))) return -1;
  return std::stoi(m[1]);
}

TEST(ReportCli, HtmlRendersItsPlotsInHeadlessChromiumWithoutConsoleErrors) {
  std::string browser;
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (testing::have_program(b)) {
      browser = b;
      break;
    }
  if (browser.empty())
    GTEST_SKIP() << "no headless browser: install Debian's chromium (scripts/setup.sh does) to "
                    "check that report.html renders";
  ScratchDir dir("browser");
  ASSERT_EQ(run_cases("cpu,wrong:ignore-cu-seqlens,wrong:readout-before-update",
                      "-q --report-dir " + (dir / "r"))
                .code,
            1);
  const BrowserCheck page = open_in_chromium(browser, dir / "r/report.html", dir / "profile");
  EXPECT_TRUE(page.console.empty()) << page.console.front();  // errors, failed loads
  const int plots = attribute(page.dom, "data-plots"),
            rendered = attribute(page.dom, "data-plots-rendered");
  EXPECT_GE(plots, 6) << page.dom.substr(0, 2000);
  EXPECT_EQ(rendered, plots) << "plots without a visible curve";

  EXPECT_EQ(attribute(page.dom, "data-resources"), 0) << "the page fetched something";

  // The checks can fail: the same page with a script error and an image from the network.
  std::string html = testing::read_file(dir / "r/report.html");
  html.insert(html.find("<h1>"),
              "<img src=\"https://cdn.example.com/x.png\"><script>undefined_function();</script>");
  testing::write_file(dir.path() / "bad.html", html);
  const BrowserCheck bad = open_in_chromium(browser, dir / "bad.html", dir / "profile");
  EXPECT_EQ(bad.console.size(), 1u) << bad.dom.substr(0, 2000);
  EXPECT_EQ(attribute(bad.dom, "data-resources"), 1);
  EXPECT_EQ(attribute(bad.dom, "data-plots-rendered"), plots);
}

}  // namespace
}  // namespace deltacheck::reports
