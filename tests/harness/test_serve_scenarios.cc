// Serving scenarios (ops/serve) through the harness: the cpu backend passes every scenario of
// the gate; each deliberately wrong runtime is flagged, and its failure names the request the
// expansion says goes wrong first, the call and the block; a backend lacking a call kind is
// unsupported with the reason.
#include <gtest/gtest.h>

#include <string>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/call_plan.h"
#include "harness/isolation.h"
#include "harness/runner.h"
#include "ops/serve/params.h"
#include "ops/serve/scenario.h"

namespace deltacheck::backends {
namespace {

using ops::serve::Scenario;

std::vector<cases::Case> serve_cases(const std::string& suite) {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite(suite))
    if (c.op() == "serve") out.push_back(c);
  return out;
}

TEST(ServeScenarios, CpuPassesEveryGateScenario) {
  auto cpu = make_backend("cpu");
  const auto cases = serve_cases("gate");
  ASSERT_GE(cases.size(), 8u);
  for (const cases::Case& c : cases) {
    const CaseResult r = run_case(prepare(c), *cpu, true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    EXPECT_EQ(r.seq_lengths.size(), static_cast<size_t>(c.get_int("requests")));
  }
}

// The first request (lowest index) each wrong runtime corrupts, from the expansion alone.
int64_t first_corrupted(const std::string& backend, const Scenario& sc, int64_t spec,
                        int64_t block) {
  const int64_t n = static_cast<int64_t>(sc.requests.size());
  int64_t first = n;
  std::set<std::pair<int64_t, int64_t>> absorbed;  // checkpoints taken with rejected drafts
  std::set<int64_t> lanes_used;
  for (const ops::serve::ScenarioCall& call : sc.calls)
    for (const ops::DrivenRow& row : call.info.rows) {
      bool bad = false;
      if (backend == "wrong:serve-last-draft") bad = row.accepted >= 0 && row.accepted < spec;
      if (backend == "wrong:serve-no-reset") bad = row.reset && lanes_used.count(row.lane);
      if (backend == "wrong:serve-lookahead") {
        bad = absorbed.count({row.hit_request, row.hit_block}) > 0;
        if (row.accepted >= 0 && row.accepted < spec)
          for (const auto& [b, j] : row.checkpoints) absorbed.insert({row.request, b});
      }
      if (backend == "wrong:serve-late-checkpoint" && row.hit_request >= 0)
        bad = (row.hit_block + 1) * block <=
              static_cast<int64_t>(sc.requests[row.hit_request].tokens.size());
      lanes_used.insert(row.lane);
      if (bad) first = std::min(first, row.request);
    }
  return first < n ? first : -1;
}

// Runs scenario c on a wrong backend whose bug first corrupts request `expect` (-1: nowhere):
// a pass where the bug has nothing to act on, else a fail naming that request, its call and
// block. Returns whether it was flagged.
bool judged_as_expected(Backend& backend, const cases::Case& c, int64_t expect) {
  const CaseResult r = run_case(prepare(c), backend, false);
  if (expect < 0) {
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    return false;
  }
  // Under strong decay (g down to -20 per token) a wrong starting state may be forgotten below
  // the bf16 tolerance within a token: a pass there is precision, not a missed bug.
  if (c.get("gate") == "strong" && r.verdict == Verdict::kPass) return false;
  EXPECT_EQ(r.verdict, Verdict::kFail) << c.id() << ": " << r.message;
  EXPECT_NE(r.message.find("(request " + std::to_string(expect) + ", call "), std::string::npos)
      << c.id() << ": " << r.message;
  EXPECT_NE(r.message.find(", block "), std::string::npos) << r.message;
  return true;
}

// gtest parameter names: "wrong:serve-no-reset" -> "no_reset" after `prefix` characters.
std::string param_name(const std::string& backend, size_t prefix) {
  std::string n = backend.substr(prefix);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

class WrongServeRuntime : public ::testing::TestWithParam<std::string> {};

TEST_P(WrongServeRuntime, IsFlaggedWithRequestCallAndBlockNamed) {
  auto backend = make_backend(GetParam());
  int flagged = 0;
  for (const cases::Case& c : serve_cases("gate")) {
    const ops::serve::Params p = ops::serve::decode(c);
    if (p.accept_verifies()) {
      // Its calls keep states in the kernels (cache=accept, ckpt): not this runtime's kind.
      const Support s = backend_supports(*backend, c);
      EXPECT_FALSE(s.ok) << c.id();
      EXPECT_NE(s.reason.find("contract=plain"), std::string::npos) << s.reason;
      continue;
    }
    flagged += judged_as_expected(
        *backend, c, first_corrupted(GetParam(), ops::serve::expand(p), p.spec, p.block));
  }
  EXPECT_GE(flagged, 2) << GetParam();
}

// Under --isolate the runtime's own handling of each call is still what runs (it once ran the
// plain kernel in the child, and every wrong runtime passed), and a kernel's calls still run in
// a child.
TEST_P(WrongServeRuntime, IsStillFlaggedWhenIsolated) {
  auto backend = make_isolated_backend(make_backend(GetParam()), IsolationOptions{});
  auto cpu = make_isolated_backend(make_backend("cpu"), IsolationOptions{});
  EXPECT_FALSE(cpu->keeps_call_memory());
  int flagged = 0;
  for (const cases::Case& c : serve_cases("smoke")) {
    const PreparedCase pc = prepare(c);
    EXPECT_EQ(run_case(pc, *cpu, false).verdict, Verdict::kPass) << c.id();
    flagged += run_case(pc, *backend, false).verdict == Verdict::kFail;
  }
  EXPECT_GE(flagged, 1) << GetParam() << " passes every smoke scenario under isolation";
}

INSTANTIATE_TEST_SUITE_P(Bugs, WrongServeRuntime,
                         ::testing::Values("wrong:serve-lookahead", "wrong:serve-last-draft",
                                           "wrong:serve-late-checkpoint", "wrong:serve-no-reset"),
                         [](const auto& info) { return param_name(info.param, 12); });

// contract=serving: the runtime is right and a serving kernel is wrong (the cache=ckpt and
// cache=accept bugs of docs/serving.md). The first request the bug reaches, from the expansion:
// a prefill's block rows are written by the kernel; a verify resumes from the row its lane's
// last acceptance names (column 0 after a prefill).
int64_t first_corrupted_by_kernel(const std::string& backend, const Scenario& sc,
                                  const ops::serve::Params& p) {
  const int64_t spec = p.spec, block = p.block, lanes = p.lanes;
  const int64_t n = static_cast<int64_t>(sc.requests.size());
  int64_t first = n;
  std::vector<int64_t> lane_accepted(static_cast<size_t>(lanes), 0);
  std::set<std::pair<int64_t, int64_t>> wrong_checkpoints;  // {request, block}
  for (const ops::serve::ScenarioCall& call : sc.calls)
    for (const ops::DrivenRow& row : call.info.rows) {
      bool bad = row.hit_request >= 0 && wrong_checkpoints.count({row.hit_request, row.hit_block});
      if (call.info.kind == "prefill" && !p.ckpt_prefills()) {
        lane_accepted[row.lane] = 0;  // a plain prefill: the runtime keeps its final state
      } else if (call.info.kind == "prefill") {
        const bool ends_on_boundary = (row.position + row.tokens) % block == 0;
        if (backend == "wrong:ckpt-late") bad = true;  // the last block's row is never written
        if (backend == "wrong:ckpt-early") bad = bad || ends_on_boundary;
        if (backend == "wrong:ckpt-late" || backend == "wrong:ckpt-early")
          for (const auto& [b, j] : row.checkpoints) wrong_checkpoints.insert({row.request, b});
        lane_accepted[row.lane] = 0;
      } else {
        const int64_t a = lane_accepted[row.lane];
        if (backend == "wrong:accept-last-draft") bad = bad || a != spec;
        if (backend == "wrong:accept-count-ignored") bad = bad || a != 0;
        lane_accepted[row.lane] = row.accepted;
      }
      if (bad) first = std::min(first, row.request);
    }
  return first < n ? first : -1;
}

class WrongServingKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(WrongServingKernel, IsFlaggedInServingScenariosWithRequestCallAndBlockNamed) {
  auto backend = make_backend(GetParam());
  int flagged = 0;
  for (const cases::Case& c : serve_cases("gate")) {
    const ops::serve::Params p = ops::serve::decode(c);
    if (!p.accept_verifies()) {  // spec verifies: not a serving kernel's mode
      EXPECT_FALSE(backend_supports(*backend, c).ok) << c.id();
      continue;
    }
    flagged += judged_as_expected(*backend, c,
                                  first_corrupted_by_kernel(GetParam(), ops::serve::expand(p), p));
  }
  EXPECT_GE(flagged, 2) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Bugs, WrongServingKernel,
                         ::testing::Values("wrong:ckpt-late", "wrong:ckpt-early",
                                           "wrong:accept-last-draft", "wrong:accept-count-ignored"),
                         [](const auto& info) { return param_name(info.param, 6); });

TEST(ServeScenarios, BackendWithoutSpecCallsIsUnsupportedWithTheReason) {
  // wrong:decode-wrong-slot runs pooled modes only: a scenario's prefill calls are beyond it.
  auto b = make_backend("wrong:pool-writes-padding");
  const cases::Case c = serve_cases("smoke").front();
  const Support s = backend_supports(*b, c);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("prefill calls"), std::string::npos) << s.reason;
  EXPECT_EQ(run_case(prepare(c), *b, false).verdict, Verdict::kUnsupported);
}

}  // namespace
}  // namespace deltacheck::backends
