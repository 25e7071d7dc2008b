// report merge against what each shard selected (issue 35, R1 and R2): a shard whose results do
// not cover its selected cases, or hold a case outside them, is an error naming the shard file
// and the first missing case; case ids are counted in their canonical spelling, so one case
// spelled two ways is one case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cases/case.h"
#include "reports/report.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

using harness::CaseResult;
using harness::Verdict;
using testing::read_file;
using testing::run_command;
using testing::ScratchDir;
using testing::write_file;

const std::vector<std::string> kIds{
    "gdr(layout=packed[3,0,4],K=8,V=8,seed=7)", "gdr(layout=single[5],K=8,V=8,seed=8)",
    "mask(B=1,q=4,kv=8,cache=static,seed=9)", "mask(B=2,seed=10)", "gdr(layout=batch[2x3],seed=1)"};

CaseResult result(const std::string& id, const std::string& backend, Verdict v) {
  CaseResult r;
  r.case_id = id;
  r.op = id.substr(0, id.find('('));
  r.backend = backend;
  r.verdict = v;
  return r;
}

// A run of every case in kIds on two backends (the second fails the gdr cases), cut into `n`
// shards as the tool cuts them: case i goes to shard i % n.
std::vector<Report> shards(int n) {
  std::vector<Report> out(n);
  for (int s = 0; s < n; ++s) {
    Report& r = out[s];
    r.tool_version = "0.1.0";
    r.git_revision = "abc1234";
    r.tolerance = "tol-v1";
    r.selection = {{"suite", nullptr}, {"cases", kIds}, {"filter", ""}, {"seed", nullptr}};
    r.backends = {"cpu", "wrong:x"};
    r.fail_on = default_fail_on();
    r.selected_cases = static_cast<int64_t>(kIds.size());
    r.shard_index = s;
    r.shard_count = n;
    for (size_t i = s; i < kIds.size(); i += n)
      for (const std::string& b : r.backends)
        r.entries.push_back(make_entry(
            result(kIds[i], b, b == "cpu" || kIds[i][0] == 'm' ? Verdict::kPass : Verdict::kFail),
            static_cast<int64_t>(i)));
  }
  return out;
}

TEST(MergeCoverage, AShardWithoutItsFailingResultsIsAnError) {
  std::vector<Report> s = shards(2);
  ASSERT_TRUE(merge_reports(s, {"s0", "s1"}).status.ok());
  // Shard 1 holds cases 1 and 3; its failing result (case 1 on wrong:x) removed.
  auto& e = s[1].entries;
  e.erase(std::remove_if(e.begin(), e.end(),
                         [](const Entry& x) { return x.result.verdict != Verdict::kPass; }),
          e.end());
  const MergedReport m = merge_reports(s, {"s0/report.json", "s1/report.json"});
  ASSERT_FALSE(m.status.ok());
  const std::string& why = m.status.message();
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_EQ(
      why.rfind("s1/report.json: shard 1/2 selected 2 cases but holds 1 results on wrong:x", 0), 0u)
      << why;
  EXPECT_NE(why.find("first missing is " + cases::Case::parse(kIds[1]).id()), std::string::npos)
      << why;
}

TEST(MergeCoverage, AMissingCaseNobodyHoldsIsNamedFromTheSelection) {
  std::vector<Report> s = shards(2);
  s[0].entries.erase(s[0].entries.begin(), s[0].entries.begin() + 2);  // case 0, both backends
  const MergedReport m = merge_reports(s, {"s0", "s1"});
  ASSERT_FALSE(m.status.ok());
  EXPECT_NE(m.status.message().find("s0: shard 0/2 selected 3 cases but holds 2 results on cpu; "
                                    "the first missing is " +
                                    cases::Case::parse(kIds[0]).id() + " (position 0"),
            std::string::npos)
      << m.status.message();
}

TEST(MergeCoverage, AResultOutsideTheShardsSelectionIsAnError) {
  std::vector<Report> s = shards(2);
  s[0].entries.push_back(s[1].entries.front());  // case 1 belongs to shard 1
  s[1].entries.erase(s[1].entries.begin());
  const MergedReport m = merge_reports(s, {"s0", "s1"});
  ASSERT_FALSE(m.status.ok());
  EXPECT_NE(m.status.message().find("s0: holds "), std::string::npos) << m.status.message();
  EXPECT_NE(m.status.message().find("outside the 3 cases shard 0/2 selected"), std::string::npos)
      << m.status.message();
  // A selection shorter than what an unsharded report holds.
  std::vector<Report> one = shards(1);
  one[0].selected_cases = 4;
  EXPECT_FALSE(merge_reports(one, {"r"}).status.ok());
}

TEST(MergeCoverage, OneCaseInTwoSpellingsIsOneCase) {
  // Two runs of other backends over the same cases; the second spells every id canonically
  // (defaults written out), the first as the user typed it.
  std::vector<Report> a = shards(1), b = shards(1);
  a[0].backends = {"cpu"};
  b[0].backends = {"wrong:x"};
  auto keep = [](Report& r, const std::string& backend) {
    std::vector<Entry> kept;
    for (Entry& e : r.entries)
      if (e.result.backend == backend) kept.push_back(e);
    r.entries = kept;
  };
  keep(a[0], "cpu");
  keep(b[0], "wrong:x");
  for (Entry& e : b[0].entries) e.result.case_id = cases::Case::parse(e.result.case_id).id();
  const MergedReport m = merge_reports({a[0], b[0]}, {"a", "b"});
  ASSERT_TRUE(m.status.ok()) << m.status.message();
  EXPECT_EQ(m.report.selected_cases, static_cast<int64_t>(kIds.size()));
  for (const Entry& e : m.report.entries)
    EXPECT_EQ(e.result.case_id, cases::Case::parse(e.result.case_id).id());
  // The same case twice on one backend, in two spellings: a duplicate.
  std::vector<Report> twice = {a[0], a[0]};
  twice[1].entries[0].result.case_id = cases::Case::parse(kIds[0]).id();
  twice[1].entries.resize(1);
  EXPECT_FALSE(merge_reports(twice, {"a", "a2"}).status.ok());
  // An id that does not parse is an error naming the file.
  a[0].entries[1].result.case_id = "gdr(H=3,HV=4)";
  const MergedReport bad = merge_reports({a[0], b[0]}, {"a/report.json", "b"});
  ASSERT_FALSE(bad.status.ok());
  EXPECT_EQ(bad.status.message().rfind("a/report.json: case id 'gdr(H=3,HV=4)' does not parse", 0),
            0u)
      << bad.status.message();
}

// The tool: shards of a real run with their failing results removed merge to exit 2, one line.
TEST(MergeCoverage, TheToolRefusesShardsWithoutTheirFailingResults) {
  ScratchDir dir("merge-coverage");
  const std::string run = testing::deltacheck() +
                          " run --backend cpu,wrong:readout-before-update -q --case "
                          "'gdr(layout=packed[7,0,9],K=8,V=8,seed=3)' --case "
                          "'gdr(layout=single[12],K=8,V=8,seed=4)' --case "
                          "'gdr(layout=packed[5,5],K=8,V=8,seed=5)' --report-dir ";
  for (int s = 0; s < 2; ++s)
    ASSERT_EQ(run_command(run + (dir / ("s" + std::to_string(s))) + " --shard " +
                          std::to_string(s) + "/2 >/dev/null")
                  .code,
              1);
  for (int s = 0; s < 2; ++s) {
    const std::filesystem::path path =
        std::filesystem::path(dir / ("s" + std::to_string(s))) / "report.json";
    nlohmann::json j = nlohmann::json::parse(read_file(path));
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& e : j["results"])
      if (e["verdict"] == "pass") kept.push_back(e);
    j["results"] = kept;
    write_file(path, j.dump());
  }
  const std::string out = dir / "merged.out", err = dir / "merged.err";
  const int code = run_command("sh -c '" + testing::deltacheck() + " report merge " + (dir / "s0") +
                               " " + (dir / "s1") + " -o " + (dir / "m") + " >" + out + " 2>" +
                               err + "'")  // paths without quotes
                       .code;
  EXPECT_EQ(code, 2);
  EXPECT_EQ(read_file(out), "");
  const std::string e = read_file(err);
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  EXPECT_NE(e.find("deltacheck: error: " + (dir / "s0") + ": shard 0/2 selected 2 cases"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("the first missing is gdr(layout=packed[7,0,9]"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir / "m") / "report.json"));
}

}  // namespace
}  // namespace deltacheck::reports
