// The harness on the ssd op: the cpu backend and the panel's right:ssd-* pass the ssd cases of
// smoke and gate (with probes), and every wrong:ssd-* backend gets the verdict its bug deserves
// on a case where the bug is visible, and passes where it is not.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

std::vector<Case> ssd_cases(const std::string& suite) {
  std::vector<Case> out;
  for (const Case& c : cases::suite(suite))
    if (c.op() == "ssd") out.push_back(c);
  return out;
}

TEST(SsdVerdicts, SuitesHoldSsdCasesOfEveryCacheMode) {
  std::set<std::string> modes;
  for (const Case& c : ssd_cases("gate")) modes.insert(c.get("cache"));
  EXPECT_EQ(modes, (std::set<std::string>{"none", "prefill", "decode", "chunked", "dynamic"}));
  EXPECT_GT(ssd_cases("full").size(), ssd_cases("gate").size());
}

class SsdCorrectBackends : public ::testing::TestWithParam<std::string> {};

TEST_P(SsdCorrectBackends, PassSmokeAndGateWithProbes) {
  auto backend = make_backend(GetParam());
  std::vector<Case> all = ssd_cases("smoke");
  for (const Case& c : ssd_cases("gate")) all.push_back(c);
  ASSERT_FALSE(all.empty());
  for (const Case& c : all) {
    const CaseResult r = run_case(prepare(c), *backend, /*probes=*/true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << GetParam() << " " << c.id() << ": " << r.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SsdCorrectBackends,
                         ::testing::Values("cpu", "right:ssd-recurrent", "right:ssd-chunked"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

struct Expectation {
  std::string backend, id;
  Verdict verdict;
};

class SsdWrongBackends : public ::testing::TestWithParam<Expectation> {};

TEST_P(SsdWrongBackends, GetTheirVerdict) {
  const Expectation& e = GetParam();
  auto backend = make_backend(e.backend);
  ASSERT_TRUE(backend->deliberately_wrong());
  const CaseResult r = run_case(prepare(Case::parse(e.id)), *backend);
  EXPECT_EQ(r.verdict, e.verdict) << e.backend << " " << e.id << ": " << r.message;
  if (e.verdict == Verdict::kLeak) {
    EXPECT_GT(r.leak_seq, 0) << r.message;
  }
}

const Expectation kExpectations[] = {
    // Several chunks of 256, or an initial state: the wrong axis moves every state passed.
    {"wrong:ssd-chunk-axis", "ssd(layout=single[600],state=none,seed=39901)", Verdict::kFail},
    {"wrong:ssd-chunk-axis", "ssd(layout=packed[40,0,7],seed=39902)", Verdict::kFail},
    {"wrong:ssd-chunk-axis", "ssd(layout=packed[40,0,7],state=none,seed=39903)", Verdict::kPass},
    // With a cache every call's tokens after its first are wrong (chunked prefill, decode steps).
    {"wrong:ssd-single-step", "ssd(layout=packed[63,0,65],cache=chunked,seed=39904)",
     Verdict::kFail},
    {"wrong:ssd-single-step", "ssd(layout=packed[3*8,40],cache=dynamic,seed=39905)",
     Verdict::kFail},
    {"wrong:ssd-single-step", "ssd(layout=packed[63,0,65],cache=none,state=none,seed=39906)",
     Verdict::kPass},
    // Request 0 exact, later requests read its chunk states: a leak on packed cases.
    {"wrong:ssd-chunk-grid", "ssd(layout=packed[300,0,600],state=none,seed=39907)", Verdict::kLeak},
    {"wrong:ssd-chunk-grid", "ssd(layout=packed[100,0,50],seed=39908)", Verdict::kLeak},
    {"wrong:ssd-chunk-grid", "ssd(layout=single[600],seed=39909)", Verdict::kPass},
    {"wrong:ssd-state-leak", "ssd(layout=packed[100,0,100],seed=39910)", Verdict::kLeak},
    {"wrong:ssd-state-leak", "ssd(layout=batch[3x100],seed=39911)", Verdict::kPass},
    {"wrong:ssd-no-skip", "ssd(layout=packed[100,0,100],seed=39912)", Verdict::kFail},
    {"wrong:ssd-no-skip", "ssd(layout=packed[100,0,100],D=0,seed=39913)", Verdict::kPass},
    {"wrong:ssd-no-gate", "ssd(layout=packed[100,0,100],z=1,seed=39914)", Verdict::kFail},
    {"wrong:ssd-no-gate", "ssd(layout=packed[100,0,100],seed=39915)", Verdict::kPass},
    {"wrong:ssd-no-dt-bias", "ssd(layout=packed[100,0,100],seed=39916)", Verdict::kFail},
    {"wrong:ssd-no-softplus", "ssd(layout=packed[100,0,100],seed=39917)", Verdict::kFail},
    {"wrong:ssd-no-softplus", "ssd(layout=packed[1*8],cache=decode,seed=39918)", Verdict::kFail},
    {"wrong:ssd-no-dt-limit", "ssd(layout=packed[100,0,100],dt_limit=on,seed=39919)",
     Verdict::kFail},
    {"wrong:ssd-no-dt-limit", "ssd(layout=packed[100,0,100],seed=39920)", Verdict::kPass},
};

INSTANTIATE_TEST_SUITE_P(Bugs, SsdWrongBackends, ::testing::ValuesIn(kExpectations),
                         [](const auto& info) {
                           std::string n =
                               info.param.backend.substr(10) + "_" + std::to_string(info.index);
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Every wrong:ssd-* backend is in the table above.
TEST(SsdWrongBackendsList, EveryOneHasAnExpectation) {
  std::set<std::string> listed, expected;
  for (const BackendInfo& b : list_backends())
    if (b.name.rfind("wrong:ssd-", 0) == 0) listed.insert(b.name);
  for (const Expectation& e : kExpectations) expected.insert(e.backend);
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(listed.size(), 9u);
}

}  // namespace
}  // namespace deltacheck::backends
