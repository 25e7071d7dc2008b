// The layer's serving state (docs/serving.md, "The layer's serving state"): the cpu backend and
// the panel pass every gate case of cache=pool and cache=accept and the one-token conv update
// calls, and each deliberately wrong handling of that state (backends/
// wrong_layer_serving_backends.cc) is a fail on every gate case where its bug can show, a pass
// where it cannot.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

// The gate's layer cases of the new modes, and its one-token calls (single[1], single[...]
// dynamic).
std::vector<cases::Case> serving_cases() {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite("gate")) {
    if (c.op() != "layer") continue;
    const std::string& cache = c.get("cache");
    const bool one_token_calls = c.layout().kind == cases::Layout::Kind::kSingle &&
                                 (cache == "decode" || cache == "dynamic");
    if (cache == "pool" || cache == "accept" || cache == "ckpt" || cache == "spec" ||
        one_token_calls)
      out.push_back(c);
  }
  return out;
}

TEST(LayerServing, TheGateHoldsEachModeAndTheCpuBackendAndThePanelPassIt) {
  std::map<std::string, int> per_mode;
  for (const cases::Case& c : serving_cases()) ++per_mode[c.get("cache")];
  EXPECT_GE(per_mode["pool"], 5);
  EXPECT_GE(per_mode["accept"], 5);
  EXPECT_GE(per_mode["ckpt"], 3);
  EXPECT_GE(per_mode["spec"], 3);
  EXPECT_GE(per_mode["decode"] + per_mode["dynamic"], 4);
  for (const char* name : {"cpu", "right:recurrent", "right:chunked", "right:chunked-lowp"}) {
    auto b = make_backend(name);
    for (const cases::Case& c : serving_cases()) {
      const CaseResult r = run_case(prepare(c), *b, true);
      EXPECT_EQ(r.verdict, Verdict::kPass) << name << " " << c.id() << ": " << r.message;
    }
  }
}

// Whether the case gives the backend's bug a chance to change a result.
bool bug_can_show(const std::string& backend, const cases::Case& c) {
  const cases::Layout L = c.layout();
  const int64_t T = L.lengths[0], W = c.get_int("W");
  if (backend == "wrong:layer-conv-offset") return T > 1;         // partial acceptance in the batch
  if (backend == "wrong:layer-accept-clamped") return T > W - 1;  // a count above W - 1
  if (backend == "wrong:layer-spec-conv-last") return T > 1;      // a token before the last
  if (backend == "wrong:layer-ckpt-conv-stale") {  // a block that ends inside a sequence
    for (int64_t len : L.lengths)
      if (len > c.get_int("calls")) return true;
    return false;
  }
  if (backend == "wrong:layer-dirty-slot") {  // a new one-token request that is not padding
    const int64_t padding =
        L.num_seqs() == 1 ? 0 : std::min<int64_t>(c.get_int("calls"), L.num_seqs() - 1);
    for (int64_t s = 0; s < L.num_seqs() - padding; ++s)
      if (L.lengths[s] == 1 &&
          (c.get("state") == "none" || (c.get("state") == "mixed" && s % 2 == 0)))
        return true;
    return false;
  }
  return W > 2;  // wrong:conv-update-no-shift: one column has nothing to shift
}

TEST(LayerServing, EachWrongBackendFailsWhereItsBugCanShow) {
  for (const char* name : {"wrong:layer-conv-offset", "wrong:layer-accept-clamped",
                           "wrong:layer-dirty-slot", "wrong:conv-update-no-shift",
                           "wrong:layer-ckpt-conv-stale", "wrong:layer-spec-conv-last"}) {
    auto b = make_backend(name);
    int caught = 0;
    for (const cases::Case& c : serving_cases()) {
      if (!b->supports(c).ok) continue;
      const CaseResult r = run_case(prepare(c), *b, true);
      const Verdict want = bug_can_show(name, c) ? Verdict::kFail : Verdict::kPass;
      EXPECT_EQ(r.verdict, want) << name << " " << c.id() << ": " << r.message;
      caught += r.verdict == Verdict::kFail;
    }
    EXPECT_GE(caught, 2) << name;
  }
}

}  // namespace
}  // namespace deltacheck::backends
