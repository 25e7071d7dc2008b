// The alone probe tells a leak from a bug of the lone call (issue 36): wrong:conv-update-no-shift
// is right on every multi-token call and wrong on a call of one token, so a packed case's
// one-token sequence is right in the pack and wrong alone. That sequence depends on no other
// sequence: its own call is wrong against the oracle. The probe judges the alone run against the
// oracle when the two runs differ, and calls that a fail. It reported 28 leaks on the gate before.
// A real leak (the pack's run moved by a neighbour, the alone run right) stays a leak
// (tests/harness/test_probes.cc).
#include <gtest/gtest.h>

#include <string>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

TEST(AloneProbe, ALoneCallsBugIsAFailNotALeak) {
  auto b = make_backend("wrong:conv-update-no-shift");
  int lone_fails = 0, passes = 0;
  for (const cases::Case& c : cases::suite("gate")) {
    if (c.op() != "layer" || !b->supports(c).ok) continue;
    const CaseResult r = run_case(prepare(c), *b, true);
    // Its two leaks are of another kind: in packed[3*5,100,0] chunked the one-token call
    // happens only in the pack (docs/serving.md), which confirm_leak reports, not the probe.
    if (r.verdict == Verdict::kLeak) {
      EXPECT_EQ(r.message.find("probe alone"), std::string::npos) << c.id() << ": " << r.message;
    }
    if (r.message.find("right in the pack and wrong alone (its own call), not a leak") !=
        std::string::npos) {
      EXPECT_EQ(r.verdict, Verdict::kFail) << c.id();
      ++lone_fails;
    }
    passes += r.verdict == Verdict::kPass;
  }
  EXPECT_GE(lone_fails, 20);  // the packed cases with a one-token sequence or decode step
  EXPECT_GE(passes, 1);       // W = 2: nothing to shift
}

}  // namespace
}  // namespace deltacheck::backends
