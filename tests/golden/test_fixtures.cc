// Fixtures joined to the harness: a stored case is judged exactly like the generated one (same
// verdicts on right and wrong backends), and the drift check catches changed inputs,
// expectations and generator versions while tolerating last-bit differences.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/registry.h"
#include "golden_test_util.h"

namespace deltacheck::golden {
namespace {

using testing::TempDir;

TEST(GoldenFixtures, StoredCasesGetTheVerdictsOfGeneratedOnes) {
  TempDir dir;
  const std::vector<cases::Case> cs{
      cases::Case::parse("gdr(layout=packed[20,0,30],H=1,HV=2,K=16,V=16,gate=weak,seed=5)"),
      cases::Case::parse("gdr(layout=packed[7,9],H=1,HV=1,K=8,V=8,dtype=bf16,seed=6)")};
  testing::write_fixture(dir / "f.h5", cs);
  FixtureReader r;
  ASSERT_TRUE(r.open(dir / "f.h5").ok());
  int leaks = 0;
  for (const std::string name : {"cpu", "wrong:ignore-cu-seqlens", "wrong:readout-before-update"}) {
    auto backend = backends::make_backend(name);
    for (size_t i = 0; i < cs.size(); ++i) {
      StatusOr<harness::PreparedCase> stored = prepare_stored(r.read(i).take());
      ASSERT_TRUE(stored.ok()) << stored.status().message();
      const harness::CaseResult a = harness::run_case(stored.value(), *backend);
      const harness::CaseResult b = harness::run_case(harness::prepare(cs[i]), *backend);
      EXPECT_EQ(a.verdict, b.verdict) << name << " " << cs[i].id();
      EXPECT_EQ(a.message, b.message);
      EXPECT_EQ(a.worst_rel_rms, b.worst_rel_rms);
      leaks += a.verdict == harness::Verdict::kLeak;
      if (name == "cpu") {
        EXPECT_EQ(a.verdict, harness::Verdict::kPass) << a.message;
      }
    }
  }
  EXPECT_EQ(leaks, 2);  // the carried-state bug leaks on both packs
}

TEST(GoldenFixtures, CheckPassesOnAFreshFixture) {
  for (const cases::Case& c : testing::small_cases()) {
    const DriftReport r = check_drift(make_fixture_case(c));
    EXPECT_TRUE(r.ok) << r.problem;
    EXPECT_EQ(r.max_rel_deviation, 0.0);
  }
}

TEST(GoldenFixtures, CheckCatchesAChangedInputBit) {
  FixtureCase fc = make_fixture_case(testing::small_cases()[0]);
  static_cast<uint16_t*>(fc.inputs.at("k").data())[3] ^= 1;  // one bf16 ulp
  const DriftReport r = check_drift(fc);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.problem.find("input 'k': 1 of"), std::string::npos) << r.problem;
}

TEST(GoldenFixtures, CheckToleratesLastBitsButNotMore) {
  FixtureCase fc = make_fixture_case(testing::small_cases()[1]);
  std::vector<double>& o = fc.expected.at("o");
  double scale = 0;
  for (double x : o) scale = std::max(scale, std::fabs(x));
  o[2] += 1e-14 * scale;
  EXPECT_TRUE(check_drift(fc).ok);
  EXPECT_GT(check_drift(fc).max_rel_deviation, 0.0);
  o[2] += 1e-10 * scale;
  const DriftReport r = check_drift(fc);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.problem.find("expected 'o' drifted"), std::string::npos) << r.problem;
}

TEST(GoldenFixtures, CheckCatchesAnotherGeneratorVersion) {
  FixtureCase fc = make_fixture_case(testing::small_cases()[1]);
  fc.generator_version += 1;
  EXPECT_NE(check_drift(fc).problem.find("generator version"), std::string::npos);
}

TEST(GoldenFixtures, StoredOutputsMustMatchTheOperation) {
  FixtureCase fc = make_fixture_case(testing::small_cases()[1]);
  fc.outputs[0].shape[1] += 1;
  EXPECT_NE(check_stored(fc).message().find("differ from the operation's"), std::string::npos);
  FixtureCase no_expected = make_fixture_case(testing::small_cases()[1]);
  no_expected.expected.clear();
  EXPECT_NE(check_stored(no_expected).message().find("expected/o missing"), std::string::npos);
}

}  // namespace
}  // namespace deltacheck::golden
