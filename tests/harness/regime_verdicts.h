// What the regime verdict tests share (test_regime_verdicts.cc,
// test_regime_verdicts_grad_layer.cc): the panel run over a list of cases with probes, and a
// result's report of one tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"

namespace deltacheck::backends {

inline const harness::TensorReport* tensor(const CaseResult& r, const std::string& name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// The gate's cases for which `keep(c)` holds.
template <typename Keep>
std::vector<cases::Case> gate_cases(Keep keep) {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite("gate"))
    if (keep(c)) out.push_back(c);
  return out;
}

// cpu and every right:* backend pass each of `cs` they support, with probes; prints the worst
// margin of each. Returns how many cases each ran (cpu's count first).
inline std::vector<int> expect_panel_passes(const std::vector<cases::Case>& cs) {
  std::vector<int> ran;
  for (const char* name : {"cpu", "right:recurrent", "right:chunked", "right:chunked-lowp"}) {
    auto backend = make_backend(name);
    double worst = 0;
    int n = 0;
    for (const cases::Case& c : cs) {
      if (!backend->supports(c).ok) continue;
      ++n;
      const CaseResult r = run_case(prepare(c), *backend, /*probes=*/true);
      EXPECT_EQ(r.verdict, Verdict::kPass) << name << " " << c.id() << ": " << r.message;
      worst = std::max(worst, r.margin);
    }
    std::printf("  %-20s %d cases, worst margin %.2f\n", name, n, worst);
    ran.push_back(n);
  }
  return ran;
}

}  // namespace deltacheck::backends
