// The layer operation: the CPU layer passes every gate layer case (probes included), and a short
// conv that reads its left context across a packed boundary is a leak.
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

std::vector<cases::Case> layer_cases(const std::string& suite) {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite(suite))
    if (c.op() == "layer") out.push_back(c);
  return out;
}

TEST(LayerCases, CpuLayerPassesTheGate) {
  auto cpu = make_backend("cpu");
  const auto cs = layer_cases("gate");
  EXPECT_GE(cs.size(), 20u);
  for (const cases::Case& c : cs) {
    const CaseResult r = run_case(prepare(c), *cpu, true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
  }
}

TEST(LayerCases, ConvReadingThePreviousSequenceIsALeak) {
  auto wrong = make_backend("wrong:conv-reads-previous");
  int leaks = 0;
  for (const cases::Case& c : layer_cases("gate")) {
    // The pools' conv rows, not a left context in the row: wrong:conv-reads-previous declines.
    if (c.get("cache") == "pool" || c.get("cache") == "accept" || c.get("cache") == "ckpt" ||
        c.get("cache") == "spec")
      continue;
    const cases::Layout L = cases::Layout::parse(c.get("layout"));
    // The bug needs a sequence with tokens before it in the row.
    bool preceded = false;
    int64_t seen = 0;
    for (int64_t l : L.lengths) {
      if (seen > 0 && l > 0) preceded = true;
      seen += l;
    }
    const CaseResult r = run_case(prepare(c), *wrong, true);
    if (!preceded) {
      EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
      continue;
    }
    EXPECT_EQ(r.verdict, Verdict::kLeak) << c.id() << ": " << r.message;
    leaks += r.verdict == Verdict::kLeak;
  }
  EXPECT_GE(leaks, 15);
}

}  // namespace
}  // namespace deltacheck::backends
