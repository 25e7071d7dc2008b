// The long-context cases (docs/cases.md#long-context) and the bug they exist for
// (sparkinfer#1071: a resumed prefill started from a zero state, past the lengths the accuracy
// gates tried): the suites hold the sequences, and wrong:resume-zero-beyond-16k, which is the cpu
// kernel bit for bit up to 16384 tokens a call, fails the gate's 20K case (a fail: the sequence
// is wrong alone too, not a leak) while the cpu kernel passes it. The full suite's 32K-128K
// cases are run by the panel test (tests/panel), not here.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/call_plan.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

constexpr int64_t kThreshold = 16384;  // wrong:resume-zero-beyond-16k's path switch

int64_t longest(const Case& c) {
  int64_t n = 0;
  for (int64_t len : c.layout().lengths) n = std::max(n, len);
  return n;
}

// The longest sequence of each op's cases in a suite (and of its cases at K = V = 128).
struct Longest {
  int64_t gdr = 0, gdr_qwen_dims = 0, gdr_grad = 0, layer = 0;
};
Longest longest_of(const std::string& suite) {
  Longest l;
  for (const Case& c : cases::suite(suite)) {
    if (c.op() != "gdr" && c.op() != "gdr_grad" && c.op() != "layer") continue;
    const int64_t n = longest(c);
    if (c.op() == "gdr") {
      l.gdr = std::max(l.gdr, n);
      if (c.get("K") == "128" && c.get("V") == "128")
        l.gdr_qwen_dims = std::max(l.gdr_qwen_dims, n);
    }
    if (c.op() == "gdr_grad") l.gdr_grad = std::max(l.gdr_grad, n);
    if (c.op() == "layer") l.layer = std::max(l.layer, n);
  }
  return l;
}

TEST(LongContext, TheSuitesHoldLongSequences) {
  const Longest gate = longest_of("gate"), full = longest_of("full");
  EXPECT_GT(gate.gdr, kThreshold) << "gate: a gdr sequence past the 16K path switch";
  EXPECT_GE(full.gdr, 131072) << "full: a 128K-token gdr sequence";
  EXPECT_GE(full.gdr_qwen_dims, 32768) << "full: 32K tokens at Qwen's K = V = 128";
  EXPECT_GE(full.gdr_grad, 16384) << "full: a 16K-token backward";
  EXPECT_GE(full.layer, 32768) << "full: a 32K-token layer";
}

// The gate's long case: a 20000-token sequence between 20 + 20 short ones and a zero-length one,
// bf16, a random initial state.
Case gate_long_case() {
  for (const Case& c : cases::suite("gate"))
    if (c.op() == "gdr" && longest(c) > kThreshold) return c;
  ADD_FAILURE() << "no gdr case of the gate holds more than " << kThreshold << " tokens";
  return Case::parse("gdr(layout=packed[3*20,20000,0,2*20],H=1,HV=2,K=16,V=16,seed=32000)");
}

TEST(LongContext, ResumeZeroFailsTheGateLongCaseAsAFailNotALeak) {
  const harness::PreparedCase pc = prepare(gate_long_case());
  auto cpu = make_backend("cpu");
  const CaseResult ok = run_case(pc, *cpu, /*probes=*/true);
  EXPECT_EQ(ok.verdict, Verdict::kPass) << ok.message;
  auto bug = make_backend("wrong:resume-zero-beyond-16k");
  const CaseResult r = run_case(pc, *bug, /*probes=*/true);
  EXPECT_EQ(r.verdict, Verdict::kFail) << verdict_name(r.verdict) << ": " << r.message;
  // The long sequence (seq 20) is the first wrong one, and it is wrong alone too: the oracle
  // comparison's own verdict, not a probe's.
  EXPECT_NE(r.message.find("seq 20 is wrong alone too, not a leak"), std::string::npos)
      << r.message;
  // Not a near miss: the initial state missing from the first tokens' outputs.
  EXPECT_GT(r.margin, 10.0) << r.message;
}

// Outputs of one backend on a case, driven as the runner drives it (calls for chunked caches).
cases::TensorMap outputs_of(const char* backend, const harness::PreparedCase& pc) {
  auto b = make_backend(backend);
  cases::TensorMap out = harness::allocate_outputs(pc.outputs);
  const Status st = harness::execute(*b, pc.c, pc.inputs, out);
  EXPECT_TRUE(st.ok()) << backend << ": " << st.message();
  return out;
}

// Whether every output holds the same bytes in a and b.
bool same_bits(const cases::TensorMap& a, const cases::TensorMap& b) {
  for (const cases::Tensor& t : a.all()) {
    const cases::Tensor& u = b.at(t.name());
    if (t.nbytes() != u.nbytes() || std::memcmp(t.data(), u.data(), t.nbytes()) != 0) return false;
  }
  return true;
}

// The path switch: up to 16384 tokens in a call the bug is the cpu kernel, bit for bit (so no
// shorter case can see it); one token more and its outputs move. Tiny heads, no oracle needed.
TEST(LongContext, ResumeZeroIsTheCpuKernelUpToSixteenKTokensACall) {
  for (const int64_t len : {kThreshold, kThreshold + 1}) {
    const Case c = Case::parse("gdr(layout=packed[5," + std::to_string(len) +
                               "],H=1,HV=1,K=4,V=4,gate=zero,seed=32000)");
    const harness::PreparedCase pc = prepare(c);
    const bool same =
        same_bits(outputs_of("cpu", pc), outputs_of("wrong:resume-zero-beyond-16k", pc));
    EXPECT_EQ(same, len <= kThreshold) << c.id();
  }
  // The gate's 8K chunked case: every call under the switch.
  for (const Case& c : cases::suite("gate"))
    if (c.op() == "gdr" && longest(c) >= 8192 && longest(c) <= kThreshold) {
      const harness::PreparedCase pc = prepare(c);
      EXPECT_TRUE(same_bits(outputs_of("cpu", pc), outputs_of("wrong:resume-zero-beyond-16k", pc)))
          << c.id();
    }
}

}  // namespace
}  // namespace deltacheck::backends
