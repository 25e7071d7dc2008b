// Cache modes: the CPU kernels pass every mode in the gate suite, the call plans cut sequences
// where bugs live, and each deliberately wrong handling of state between calls is caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/call_plan.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

std::vector<cases::Case> gdr_cases_with_cache(const std::vector<std::string>& modes) {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite("gate"))
    if (c.op() == "gdr")
      for (const auto& m : modes)
        if (c.get("cache") == m) out.push_back(c);
  return out;
}

TEST(CacheModes, EveryModeIsInTheGateAndPassesOnCpu) {
  auto cpu = make_backend("cpu");
  std::map<std::string, int> per_mode;
  for (const cases::Case& c :
       gdr_cases_with_cache({"none", "prefill", "decode", "chunked", "dynamic", "pool", "spec",
                             "ckpt", "accept", "tree"})) {
    const CaseResult r = run_case(prepare(c), *cpu, true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    ++per_mode[c.get("cache")];
  }
  for (const char* m : {"none", "prefill", "decode", "chunked", "dynamic", "pool", "spec", "ckpt",
                        "accept", "tree"})
    EXPECT_GE(per_mode[m], 3) << m;
}

TEST(CacheModes, ChunkedPlanCutsMidChunkAndIntoSingleTokens) {
  const cases::Case c = cases::Case::parse("gdr(layout=packed[200,3,0],cache=chunked,calls=5)");
  const auto plan = call_plan(c);
  ASSERT_EQ(plan.size(), 5u);
  bool single = false, mid_chunk = false;
  std::vector<int64_t> covered(3, 0);
  for (const Call& call : plan)
    for (const Piece& p : call.pieces) {
      EXPECT_EQ(p.offset, covered[p.seq]) << "pieces of a sequence are consecutive";
      covered[p.seq] += p.length;
      single = single || p.length == 1;
      mid_chunk = mid_chunk || (p.length > 0 && (p.offset % 64) != 0);
    }
  EXPECT_EQ(covered, (std::vector<int64_t>{200, 3, 0}));
  EXPECT_TRUE(single);
  EXPECT_TRUE(mid_chunk);
  const auto dyn = call_plan(cases::Case::parse("gdr(layout=packed[5,1],cache=dynamic,calls=3)"));
  ASSERT_EQ(dyn.size(), 4u);  // prefill + 3 decode steps
  EXPECT_EQ(dyn[1].cache, "decode");
  EXPECT_EQ(dyn[3].pieces.size(), 1u);  // the 1-token sequence has finished decoding
}

struct Expectation {
  std::string backend;
  std::vector<std::string> modes;
  std::vector<Verdict> allowed;  // the verdicts that count as caught
};

// Whether a case gives the bug a chance: a verify of one token (no drafts) resumes from the
// only row whatever the count says; a checkpoint taken early needs a block that ends inside a
// sequence.
bool bug_can_show(const std::string& backend, const cases::Case& c) {
  if (backend.rfind("wrong:accept-", 0) == 0) return c.layout().row_length() > 1;
  if (backend != "wrong:ckpt-early") return true;
  for (int64_t len : c.layout().lengths)
    if (len >= c.get_int("calls")) return true;
  return false;
}

class WrongCacheHandling : public ::testing::TestWithParam<Expectation> {};

TEST_P(WrongCacheHandling, IsCaughtInEveryCaseOfItsModes) {
  const Expectation& e = GetParam();
  auto backend = make_backend(e.backend);
  int checked = 0;
  for (const cases::Case& c : gdr_cases_with_cache(e.modes)) {
    if (!backend->supports(c).ok) continue;
    if (!bug_can_show(e.backend, c)) continue;
    const PreparedCase pc = prepare(c);
    double state_scale = 1.0;
    if (pc.expected.count("final_state")) {
      state_scale = 0.0;
      for (double x : pc.expected.at("final_state"))
        state_scale = std::max(state_scale, std::abs(x));
    }
    if (state_scale < 1e-30) continue;  // the state decayed to nothing: no precision to lose
    const CaseResult r = run_case(pc, *backend, false);
    // One bf16 rounding of the state (rel RMS ~1.7e-3) is as accurate as a tensor-core kernel's
    // fp32 state computed with bf16 operands (the chunked bf16-operand baseline: 3.9e-4 to
    // 2.4e-3 on these cases), so on bf16 activations a bf16 state is caught only where that
    // baseline is more accurate than one rounding (docs/tolerance.md). fp32 and fp16
    // activations always catch it.
    if (e.backend == "wrong:bf16-state" && c.get("dtype") == "bf16") continue;
    EXPECT_TRUE(std::find(e.allowed.begin(), e.allowed.end(), r.verdict) != e.allowed.end())
        << e.backend << " got " << verdict_name(r.verdict) << " on " << c.id();
    ++checked;
  }
  EXPECT_GE(checked, 5) << e.backend;
}

INSTANTIATE_TEST_SUITE_P(
    Bugs, WrongCacheHandling,
    ::testing::Values(
        Expectation{"wrong:decode-wrong-slot",
                    {"decode", "dynamic", "pool", "spec"},
                    {Verdict::kFail, Verdict::kLeak}},
        Expectation{"wrong:pool-writes-padding", {"pool"}, {Verdict::kFail, Verdict::kLeak}},
        Expectation{"wrong:bf16-state", {"chunked", "dynamic", "pool", "spec"}, {Verdict::kFail}},
        // A chunked prefill that restarts every call from a zero state.
        Expectation{"wrong:ignore-state", {"chunked", "dynamic"}, {Verdict::kFail}},
        // The serving kernel contracts (docs/serving.md): a pool row holding the wrong state is
        // a wrong number of the sequence that owns it, never a leak.
        Expectation{"wrong:ckpt-late", {"ckpt"}, {Verdict::kFail}},
        Expectation{"wrong:ckpt-early", {"ckpt"}, {Verdict::kFail}},
        Expectation{"wrong:accept-last-draft", {"accept"}, {Verdict::kFail}},
        Expectation{"wrong:accept-count-ignored", {"accept"}, {Verdict::kFail}},
        // Tree verify: every gate tree case holds chains, fans, stars and random trees.
        Expectation{"wrong:tree-chain", {"tree"}, {Verdict::kFail}},
        Expectation{"wrong:tree-parent-off-by-one", {"tree"}, {Verdict::kFail}}),
    [](const auto& info) {
      std::string n = info.param.backend.substr(6);
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace deltacheck::backends
