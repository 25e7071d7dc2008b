// The report formats from a synthetic report holding every verdict: report.json round trips
// exactly (non-finite numbers included), junit.xml validates against the JUnit schema (and the
// schema rejects broken files), the Markdown and HTML say what they must, merges restore the
// unsharded report and refuse inconsistent inputs, and report files are written atomically.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>

#include "cases/suites.h"
#include "harness/tolerance.h"
#include "reports/report.h"
#include "reports/report_text.h"
#include "tests/reports/report_test_util.h"

namespace deltacheck::reports {
namespace {

using harness::CaseResult;
using harness::Verdict;
using testing::ScratchDir;

harness::Metrics metrics(double rel_rms, double max_abs, int64_t count) {
  harness::Metrics m;
  m.rel_rms = rel_rms;
  m.nmse = rel_rms * rel_rms;
  m.max_abs = max_abs;
  m.max_index = 3;
  m.ref_max_abs = 1.0;
  m.count = count;
  return m;
}

// A leak in sequence 2 of packed[3,0,4] (sequence 1 is empty), with per-head curves.
CaseResult leak_result() {
  CaseResult r;
  r.case_id = "gdr(layout=packed[3,0,4],dtype=fp32,gate=strong,cache=prefill,seed=7)";
  r.op = "gdr";
  r.backend = "wrong:ignore-cu-seqlens";
  r.verdict = Verdict::kLeak;
  r.message = "seq 2 from token 0, max|Δ| 4.00e-01 (rel_rms 3.1e-02 > 5.0e-03 in o)";
  r.seq_lengths = {3, 0, 4};
  harness::TensorReport t;
  t.name = "o";
  t.dtype = "fp32";
  t.ok = false;
  t.metrics = metrics(3.1e-2, 0.4, 28);
  t.baseline = metrics(1e-7, 1e-7, 28);
  t.threshold = {5e-3, 1e-3, 1.4e-45};
  harness::SeqReport s0, s1, s2;
  s0.seq = 0, s0.length = 3, s0.metrics = metrics(1e-7, 2e-7, 12),
  s0.threshold = {5e-3, 1e-3, 1e-45};
  s1.seq = 1, s1.length = 0;
  s2.seq = 2, s2.length = 4, s2.ok = false, s2.first_bad_token = 0;
  s2.metrics = metrics(0.2, 0.4, 16), s2.threshold = {5e-3, 1e-3, 1e-45};
  t.seqs = {s0, s1, s2};
  t.token_error = {1e-7, 2e-7, 1.5e-7, 0.4, 0.3, 0.2, 0.1};
  t.head_token_error = {{1e-7, 2e-7, 1e-7, 0.4, 0.3, 0.2, 0.1},
                        {5e-8, 1e-7, 1.5e-7, 0.1, 0.3, 0.1, 0.05}};
  r.tensors = {t};
  r.probes = {{"isolation", Verdict::kLeak, "seq 2 changed when seq 0 was regenerated"}};
  r.leak_seq = 2;
  r.leak_token = 0;
  r.leak_max_abs = 0.4;
  r.worst_tensor = "o";
  r.worst_rel_rms = 3.1e-2;
  r.worst_threshold = 5e-3;
  r.margin = 400;
  r.seconds_backend = 0.01;
  r.seconds_total = 0.02;
  return r;
}

CaseResult simple_result(const std::string& id, const std::string& backend, Verdict v,
                         const std::string& message) {
  CaseResult r;
  r.case_id = id;
  r.op = id.substr(0, id.find('('));
  r.backend = backend;
  r.verdict = v;
  r.message = message;
  return r;
}

// Every verdict, including a tensor whose numbers are not finite.
Report sample_report() {
  Report rep;
  rep.tool_version = "0.1.0";
  rep.git_revision = "abc1234";
  rep.tolerance = "tol-v1";
  rep.selection = {{"suite", "smoke"}, {"cases", nlohmann::ordered_json::array()}};
  rep.backends = {"cpu", "wrong:ignore-cu-seqlens"};
  rep.fail_on = default_fail_on();
  rep.machines = {{"host", 2, "cpu"}};
  rep.started_at = "2025-01-01T00:00:00Z";
  rep.seconds = 1.5;
  const std::string packed =
      "gdr(layout=packed[3,0,4],dtype=fp32,gate=strong,cache=prefill,seed=7)";
  const std::string single = "gdr(layout=single[5],dtype=bf16,state=none,cache=none,seed=8)";
  const std::string mask = "mask(B=1,q=4,kv=8,cache=static,seed=9)";
  CaseResult nan = simple_result(single, "wrong:ignore-cu-seqlens", Verdict::kFail,
                                 "3 non-finite values in 'o' (first at index 0)");
  harness::TensorReport t;
  t.name = "o";
  t.dtype = "bf16";
  t.ok = false;
  t.metrics =
      metrics(std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 5);
  t.metrics.non_finite = 3;
  t.token_error = {std::numeric_limits<double>::infinity(), 1e-3, 0.0, 2e-300, 1e-2};
  nan.tensors = {t};
  nan.seq_lengths = {5};
  const std::vector<CaseResult> results{
      simple_result(packed, "cpu", Verdict::kPass, ""),
      leak_result(),
      simple_result(single, "cpu", Verdict::kError, "threw: out of <memory> & \"quotes\""),
      nan,
      simple_result(mask, "cpu", Verdict::kPass, ""),
      simple_result(mask, "wrong:ignore-cu-seqlens", Verdict::kUnsupported,
                    "wrong:ignore-cu-seqlens implements only gdr"),
  };
  for (size_t i = 0; i < results.size(); ++i) rep.entries.push_back(make_entry(results[i], i / 2));
  Entry skipped = make_entry(
      simple_result("mask(B=2,seed=10)", "cpu", Verdict::kSkipped, "not run: | a pipe"), 3);
  rep.entries.push_back(skipped);
  rep.selected_cases = 4;
  return rep;
}

TEST(ReportModel, FailOnParsesVerdictsAndRefusesPass) {
  std::vector<Verdict> v;
  ASSERT_TRUE(parse_fail_on({"leak", "fail"}, v).ok());
  EXPECT_EQ(v, (std::vector<Verdict>{Verdict::kFail, Verdict::kLeak}));
  EXPECT_EQ(fail_on_string(v), "fail,leak");
  EXPECT_FALSE(parse_fail_on({"pass"}, v).ok());
  EXPECT_FALSE(parse_fail_on({"flaky"}, v).ok());
  EXPECT_FALSE(parse_fail_on({}, v).ok());

  Report r = sample_report();
  EXPECT_TRUE(fails_gate(r));
  r.fail_on = {Verdict::kSkipped};  // the sample has one skipped result
  EXPECT_TRUE(fails_gate(r));
  r.entries.pop_back();
  EXPECT_FALSE(fails_gate(r));
}

TEST(ReportModel, FamilySeedAndRerunComeFromTheId) {
  EXPECT_EQ(case_family("gdr(layout=packed[63,0,65],H=2,dtype=bf16,cache=prefill,seed=7)"),
            "gdr packed cache=prefill");
  EXPECT_EQ(case_family("gdr(layout=batch[3x64],cache=none)"), "gdr batch cache=none");
  EXPECT_EQ(case_family("segments(source=cu,B=1,T=64)"), "segments");
  EXPECT_EQ(case_seed("gdr(layout=packed[1,2],seed=42)"), 42);
  EXPECT_EQ(case_seed("gdr(layout=packed[1,2])"), -1);
  // A layout's commas are not parameter separators.
  EXPECT_EQ(case_seed("x(layout=packed[1,seed=3],seed=5)"), 5);
  EXPECT_EQ(rerun_command("cpu", "gdr(layout=single[1])"),
            "deltacheck run --backend cpu --case 'gdr(layout=single[1])'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(rerun_command("external", "x(a=1)", "--cmd 'p {in} {out}'"),
            "deltacheck run --backend external --cmd 'p {in} {out}' --case 'x(a=1)'");
}

TEST(ReportModel, EntriesKeepRoundedCurvesOnlyForResultsThatAreNotAPass) {
  CaseResult pass = leak_result();
  pass.verdict = Verdict::kPass;
  EXPECT_TRUE(make_entry(pass, 0).result.tensors[0].token_error.empty());
  CaseResult leak = leak_result();
  leak.tensors[0].token_error[0] = 0.123456789;
  const Entry e = make_entry(leak, 0);
  EXPECT_EQ(e.result.tensors[0].token_error[0], 0.123);
  EXPECT_EQ(e.result.tensors[0].head_token_error.size(), 2u);
  EXPECT_EQ(e.family, "gdr packed cache=prefill");
  EXPECT_EQ(e.seed, 7);
  EXPECT_NE(e.rerun.find("--backend wrong:ignore-cu-seqlens"), std::string::npos);
}

// The one assembly both front ends use (the tool's run, the library's make_report).
TEST(ReportModel, AssemblyPlacesCasesNamesBackendsAndKeepsRerunsOfKnownBackendsOnly) {
  const std::string a = "gdr(layout=single[5],dtype=bf16,state=none,cache=none,seed=8)";
  const std::string b = "mask(B=1,q=4,cache=static,seed=9)";
  const std::string outside = "mask(B=2,seed=10)";
  RunRecord run;
  run.selection = {{"suite", "smoke"}};
  run.backends = {"cpu", "mine"};
  run.fail_on = default_fail_on();
  run.index_of = {{a, 4}, {b, 1}};
  run.selected = 6;
  run.shard_index = 1;
  run.shard_count = 2;
  run.backend_options = "--device cuda";
  run.rerunnable = std::set<std::string>{"cpu"};
  run.dumps[{a, "cpu"}] = "failures/a.h5";
  run.started_at = "2025-01-01T00:00:00Z";
  run.seconds = 2.5;
  const std::vector<CaseResult> results{simple_result(a, "mine", Verdict::kFail, "x"),
                                        simple_result(a, "cpu", Verdict::kFail, "x"),
                                        simple_result(b, "cpu", Verdict::kPass, ""),
                                        simple_result(outside, "cpu", Verdict::kLeak, "y"),
                                        simple_result(outside + "x", "cpu", Verdict::kError, "z")};
  const Report rep = assemble_report(results, run);
  EXPECT_EQ(rep.backends, (std::vector<std::string>{"mine", "cpu"}));  // as the results name them
  EXPECT_EQ(rep.tolerance, harness::describe_policy());
  EXPECT_EQ(rep.selection, run.selection);
  EXPECT_EQ(rep.shard_index, 1);
  EXPECT_EQ(rep.shard_count, 2);
  EXPECT_EQ(rep.started_at, run.started_at);
  EXPECT_EQ(rep.seconds, 2.5);
  ASSERT_EQ(rep.entries.size(), 5u);
  EXPECT_EQ(rep.entries[0].index, 4);
  EXPECT_EQ(rep.entries[2].index, 1);
  EXPECT_EQ(rep.entries[3].index, 6);  // outside the selection: the next free positions
  EXPECT_EQ(rep.entries[4].index, 7);
  EXPECT_EQ(rep.selected_cases, 8);
  EXPECT_EQ(rep.entries[0].rerun, "");  // "mine" is not rerunnable by the tool
  EXPECT_EQ(rep.entries[1].rerun, rerun_command("cpu", a, "--device cuda"));
  EXPECT_EQ(rep.entries[1].dump, "failures/a.h5");
  EXPECT_EQ(rep.entries[0].dump, "");
  EXPECT_EQ(rep.entries[2].rerun, "");  // a pass has none

  // Nothing ran (an empty shard): the requested backends; an unknown selection counts the cases.
  EXPECT_EQ(assemble_report({}, run).backends, run.backends);
  RunRecord bare;
  const Report b2 = assemble_report(results, bare);
  EXPECT_EQ(b2.entries[0].index, 0);
  EXPECT_EQ(b2.entries[2].index, 1);
  EXPECT_EQ(b2.entries[4].index, 3);
  EXPECT_EQ(b2.selected_cases, 4);
  EXPECT_NE(b2.entries[0].rerun, "");  // every backend rerunnable unless restricted
}

TEST(ReportJson, RoundTripsExactlyIncludingNonFiniteNumbers) {
  const Report r = sample_report();
  const std::string text = format_json(r);
  const LoadedReport back = parse_json(text, "sample");
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(format_json(back.report), text);
  const auto& t = back.report.entries[3].result.tensors.at(0);
  EXPECT_TRUE(std::isnan(t.metrics.rel_rms));
  EXPECT_TRUE(std::isinf(t.metrics.max_abs));
  EXPECT_TRUE(std::isinf(t.token_error[0]));
  EXPECT_NE(text.find("\"NaN\""), std::string::npos);
  EXPECT_EQ(back.report.entries[1].result.leak_seq, 2);
  EXPECT_EQ(back.report.entries[1].result.probes.at(0).verdict, Verdict::kLeak);
  // Curves of passing results are not stored.
  Report passing = r;
  CaseResult pass = leak_result();
  pass.verdict = Verdict::kPass;
  passing.entries = {make_entry(pass, 0)};
  EXPECT_EQ(format_json(passing).find("token_error"), std::string::npos);
}

// Found by fuzz_report_merge: an entry whose backend is not among the report's backends (a merged
// or hand-edited report) made the totals throw ("cannot use value() with null").
TEST(ReportJson, CountsEntriesOfBackendsTheReportDoesNotList) {
  Report r = sample_report();
  r.entries[0].result.backend = "not-listed";
  const std::string text = format_json(r);
  EXPECT_NE(text.find("\"not-listed\""), std::string::npos);
  const LoadedReport back = parse_json(text, "sample");
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(format_json(back.report), text);
}

TEST(ReportJson, RefusesOtherFilesAndOtherSchemaVersions) {
  EXPECT_FALSE(parse_json("{\"a\": 1}", "x").status.ok());
  EXPECT_FALSE(parse_json("not json", "x").status.ok());
  std::string text = format_json(sample_report());
  const std::string v = "\"schema_version\": 1";
  ASSERT_NE(text.find(v), std::string::npos);
  text.replace(text.find(v), v.size(), "\"schema_version\": 99");
  const LoadedReport lr = parse_json(text, "newer.json");
  ASSERT_FALSE(lr.status.ok());
  EXPECT_NE(lr.status.message().find("version 99"), std::string::npos);
}

// The readable id (JUnit's test name, summary.md's rows) names the same case: every id of the
// full suite comes back from it, never longer; an id this build cannot parse stays whole.
TEST(ReportText, ReadableCaseIdNamesTheSameCase) {
  for (const cases::Case& c : cases::suite("full")) {
    const std::string readable = readable_case_id(c.id());
    EXPECT_EQ(cases::Case::parse(readable).id(), c.id()) << readable;
    EXPECT_LE(readable.size(), c.id().size()) << readable;
  }
  EXPECT_EQ(readable_case_id("gdr(layout=packed[63,0,65],K=64,dtype=bf16,seed=3)"),
            "gdr(layout=packed[63,0,65],dtype=bf16,seed=3)");
  EXPECT_EQ(readable_case_id("gdr(no=such)"), "gdr(no=such)");
}

TEST(ReportText, FailureHeadlineNamesMetricThresholdAndWhere) {
  EXPECT_EQ(failure_headline(leak_result()), "rel_rms 3.1e-02 > 5.0e-03 in o (seq 2 from token 0)");
  CaseResult seq_only = leak_result();  // the tensor as a whole is within tolerance
  seq_only.tensors[0].metrics = metrics(1e-3, 1e-4, 28);
  EXPECT_EQ(failure_headline(seq_only), "rel_rms 2.0e-01 > 5.0e-03 in o (seq 2 from token 0)");
  CaseResult error = simple_result("gdr(a=1)", "cpu", Verdict::kError, "threw: boom");
  EXPECT_EQ(failure_headline(error), "threw: boom");
  const std::string details = result_details(make_entry(leak_result(), 0));
  EXPECT_NE(details.find("seq 1 (length 0): empty"), std::string::npos);
  EXPECT_NE(details.find("FAIL from token 0"), std::string::npos);
  EXPECT_NE(details.find("probe isolation: leak"), std::string::npos);
}

TEST(JUnit, CountsVerdictsAndValidatesAgainstTheSchema) {
  ASSERT_TRUE(testing::have_program("xmllint"))
      << "xmllint is missing: install libxml2-utils (scripts/setup.sh does)";
  const std::string xml = format_junit(sample_report());
  EXPECT_NE(xml.find("<testsuites name=\"deltacheck\" tests=\"7\" failures=\"2\" errors=\"1\" "
                     "skipped=\"2\""),
            std::string::npos);
  // classname: op and layout family (ops without a layout: cache mode); name: the id without
  // the parameters at their defaults, still an id --case takes.
  EXPECT_NE(xml.find("classname=\"gdr.packed\" name=\"gdr(layout=packed[3,0,4],gate=strong,seed=7)"
                     " [wrong:ignore-cu-seqlens]\""),
            std::string::npos)
      << xml;
  EXPECT_NE(
      xml.find(
          "classname=\"gdr.single\" name=\"gdr(layout=single[5],dtype=bf16,state=none,cache=none,"
          "seed=8) [cpu]\""),
      std::string::npos);
  EXPECT_NE(xml.find("classname=\"mask.static\""), std::string::npos);
  EXPECT_EQ(xml.find("classname=\"gdr\""), std::string::npos);
  // The failure's body holds the reason lines (with the error against the worst baseline), the
  // full case id and the rerun command.
  EXPECT_NE(
      xml.find("<failure message=\"rel_rms 3.1e-02 &gt; 5.0e-03 in o (seq 2 from token 0)\" "
               "type=\"leak\">seq 2 from token 0, max|Δ| 4.00e-01 (rel_rms 3.1e-02 &gt; "
               "5.0e-03 in o)\no: rel_rms 3.10e-02 (threshold 5.00e-03), max|Δ| 4.00e-01 "
               "(threshold 1.00e-03); worst same-precision baseline: rel_rms 1.00e-07, error "
               "3.1e+05x it\nprobe isolation: leak seq 2 changed when seq 0 was "
               "regenerated\ncase: gdr(layout=packed[3,0,4],dtype=fp32,gate=strong,"
               "cache=prefill,seed=7)\nrerun: deltacheck run --backend wrong:ignore-cu-seqlens"
               " --case "),
      std::string::npos)
      << xml;
  EXPECT_EQ(xml.find("<failure message=\"rel_rms 3.1e-02 &gt; 5.0e-03 in o (seq 2 from token 0)\" "
                     "type=\"leak\"/>"),
            std::string::npos);
  EXPECT_NE(xml.find("<error message=\"threw: out of &lt;memory&gt; &amp; &quot;quotes&quot;\""),
            std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"wrong:ignore-cu-seqlens implements only gdr\"/>"),
            std::string::npos);
  ScratchDir dir("junit");
  testing::write_file(dir.path() / "junit.xml", xml);
  const auto ok = testing::validate_junit(dir / "junit.xml");
  EXPECT_EQ(ok.code, 0) << ok.out;

  // The schema check can fail: a testcase without classname, a non-numeric count, two outcomes.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"classname=\"gdr.packed\" ", ""},
           {"tests=\"7\"", "tests=\"seven\""},
           {"</failure>", "</failure><error message=\"x\"/>"}}) {
    std::string broken = xml;
    broken.replace(broken.find(from), from.size(), to);
    testing::write_file(dir.path() / "broken.xml", broken);
    EXPECT_NE(testing::validate_junit(dir / "broken.xml").code, 0) << "accepted: " << to;
  }
}

TEST(Markdown, TotalsThenFailures) {
  const std::string md = format_markdown(sample_report());
  EXPECT_EQ(md.rfind("## deltacheck: FAILED", 0), 0u) << md;
  EXPECT_NE(md.find("| backend | pass | fail | leak | error | unsupported | skipped |"),
            std::string::npos);
  EXPECT_NE(md.find("| `wrong:ignore-cu-seqlens` | 0 | **1** | **1** | 0 | 1 | 0 |"),
            std::string::npos)
      << md;
  // Grouped by family: a verdict table per family, then the failures under their family.
  EXPECT_NE(md.find("| family | pass | fail | leak | error | unsupported | skipped |"),
            std::string::npos);
  EXPECT_NE(md.find("| gdr packed cache=prefill | 1 | 0 | **1** | 0 | 0 | 0 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| gdr single cache=none | 0 | **1** | 0 | **1** | 0 | 0 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("### Failures (3)"), std::string::npos);
  const size_t packed = md.find("#### gdr packed cache=prefill (1)"),
               single = md.find("#### gdr single cache=none (2)");
  ASSERT_NE(packed, std::string::npos) << md;
  ASSERT_NE(single, std::string::npos) << md;
  EXPECT_LT(packed, md.find("| leak | `wrong:ignore-cu-seqlens` |"));
  EXPECT_LT(single, md.find("| error | `cpu` |"));
  EXPECT_LT(packed, single);
  EXPECT_NE(md.find("rel_rms 3.1e-02 > 5.0e-03 in o (seq 2 from token 0)"), std::string::npos);
  EXPECT_NE(md.find("deltacheck run --backend wrong:ignore-cu-seqlens --case"), std::string::npos);
  Report clean = sample_report();
  clean.entries.resize(1);
  EXPECT_NE(format_markdown(clean).find("No failures."), std::string::npos);
  EXPECT_EQ(format_markdown(clean).rfind("## deltacheck: passed", 0), 0u);
}

TEST(Html, SelfContainedWithOnePlotPerFailingCurveAndTheBoundariesDrawn) {
  const std::string html = format_html(sample_report());
  // Nothing loads from elsewhere: no external script, style, image or font.
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link rel=\"stylesheet\""), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  std::string rest = html;
  for (size_t p; (p = rest.find("http")) != std::string::npos; rest = rest.substr(p + 4))
    EXPECT_EQ(rest.compare(p, 26, "http://www.w3.org/2000/svg"), 0) << rest.substr(p, 60);
  // Two failing results with curves (the leak and the non-finite fail), one plot each.
  const std::regex svg("<svg class=\"plot\"");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(html.begin(), html.end(), svg), std::sregex_iterator()),
      2);
  // packed[3,0,4]: boundaries at tokens 3 (twice: the empty sequence) — drawn once per sequence
  // start inside the row.
  const std::regex boundary("class=\"boundary\" x1");
  EXPECT_EQ(std::distance(std::sregex_iterator(html.begin(), html.end(), boundary),
                          std::sregex_iterator()),
            2);
  EXPECT_NE(html.find("class=\"firstbad leak\""), std::string::npos);
  EXPECT_NE(html.find("class=\"head\""), std::string::npos);
  EXPECT_NE(html.find("class=\"nonfinite\""), std::string::npos);
  EXPECT_NE(html.find("out of &lt;memory&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_EQ(html.find("<memory>"), std::string::npos);
  // The family matrix has a row per family.
  for (const char* family :
       {"gdr packed cache=prefill", "gdr single cache=none", "mask cache=static"})
    EXPECT_NE(html.find(std::string("<tr><td>") + family + "</td>"), std::string::npos) << family;
}

// The sample with a result of every case on every backend, as a run has (a merge requires it).
Report covered_sample_report() {
  Report r = sample_report();
  r.entries.push_back(make_entry(simple_result("mask(B=2,seed=10)", "wrong:ignore-cu-seqlens",
                                               Verdict::kUnsupported, "implements only gdr"),
                                 3));
  return r;
}

// The shards of a report: entry k of case index i goes to shard i % n.
std::vector<Report> shard(const Report& r, int n) {
  std::vector<Report> shards(n, r);
  for (int s = 0; s < n; ++s) {
    shards[s].entries.clear();
    shards[s].shard_index = s;
    shards[s].shard_count = n;
  }
  for (const Entry& e : r.entries) shards[e.index % n].entries.push_back(e);
  return shards;
}

TEST(Merge, ShardsMergeBackIntoTheReport) {
  const Report r = covered_sample_report();
  std::vector<Report> shards = shard(r, 3);
  std::swap(shards[0], shards[2]);  // input order does not matter
  const MergedReport m = merge_reports(shards, {"a", "b", "c"});
  ASSERT_TRUE(m.status.ok()) << m.status.message();
  Report expected = r;
  for (Entry& e : expected.entries)  // the merge spells every id canonically
    e.result.case_id = cases::Case::parse(e.result.case_id).id();
  // Entries in case order, backends in the report's order.
  std::stable_sort(expected.entries.begin(), expected.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.index < b.index; });
  expected.merged_from = {"a", "b", "c"};
  expected.seconds = 3 * r.seconds;
  EXPECT_EQ(format_json(m.report), format_json(expected));
  EXPECT_EQ(format_junit(m.report), format_junit(expected));
  EXPECT_EQ(format_markdown(m.report), format_markdown(expected));
}

TEST(Merge, RefusesMissingOrRepeatedShardsAndOtherBuilds) {
  const std::vector<Report> shards = shard(covered_sample_report(), 3);
  const MergedReport missing = merge_reports({shards[0], shards[2]}, {"a", "c"});
  ASSERT_FALSE(missing.status.ok());
  EXPECT_NE(missing.status.message().find("shard 1/3 is missing"), std::string::npos);
  EXPECT_FALSE(merge_reports({shards[0], shards[1], shards[2], shards[1]}, {"a", "b", "c", "b"})
                   .status.ok());
  std::vector<Report> other = shards;
  other[1].git_revision = "def5678";
  const MergedReport builds = merge_reports(other, {"a", "b", "c"});
  ASSERT_FALSE(builds.status.ok());
  EXPECT_NE(builds.status.message().find("one build"), std::string::npos);
  other = shards;
  other[2].tolerance = "tol-v2";
  EXPECT_FALSE(merge_reports(other, {"a", "b", "c"}).status.ok());
}

TEST(ReportFiles, WritesEveryFormatAtomicallyAndFailsCleanly) {
  ScratchDir dir("files");
  const WrittenReport w = write_report_files(sample_report(), dir / "out");
  ASSERT_TRUE(w.status.ok()) << w.status.message();
  ASSERT_EQ(w.files.size(), 4u);
  int entries = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir / "out")) {
    ++entries;
    EXPECT_NE(f.path().filename().string()[0], '.') << "temporary file left: " << f.path();
  }
  EXPECT_EQ(entries, 4);
  const LoadedReport back = read_report(dir / "out");
  ASSERT_TRUE(back.status.ok()) << back.status.message();
  EXPECT_EQ(format_json(back.report), format_json(sample_report()));
  // A report directory that is a file: an error, and nothing written.
  testing::write_file(dir.path() / "file", "x");
  EXPECT_FALSE(write_report_files(sample_report(), dir / "file/sub").status.ok());
  EXPECT_FALSE(read_report(dir / "missing").status.ok());
}

}  // namespace
}  // namespace deltacheck::reports
