// Mask checks can fail: the CPU builder passes every mask, layers and segments case of the smoke
// and gate suites bit for bit, and each deliberately wrong builder gets its verdict exactly where
// its bug changes the answer (error for the missing linear_attention rule, fail for ignored
// packing and for static-cache masks sized by the used length). Mismatch reports name the element
// and the rule that decided it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "backends/mask_adapter.h"
#include "backends/mask_builders.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/mask/params.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

// Every mask-op case of smoke and gate, prepared once (inputs + exact expectation).
const std::vector<PreparedCase>& prepared_gate_cases() {
  static const std::vector<PreparedCase> all = [] {
    std::vector<PreparedCase> v;
    std::set<std::string> seen;
    for (const char* s : {"smoke", "gate"})
      for (const Case& c : cases::suite(s))
        if (ops::mask::is_mask_op(c.op()) && seen.insert(c.id()).second) v.push_back(prepare(c));
    return v;
  }();
  return all;
}

bool pattern_has(const Case& c, const std::string& type) {
  if (c.op() != "layers") return false;
  for (const std::string& t : ops::mask::mask_layer_types(c.get("pattern")).take())
    if (t == type) return true;
  return false;
}

// linear_attention under any of its names (the per-backbone ones of Transformers PR #46738 too).
bool pattern_has_linear(const Case& c) {
  if (c.op() != "layers") return false;
  for (const std::string& t : ops::mask::mask_layer_types(c.get("pattern")).take())
    if (t.rfind("linear_attention", 0) == 0) return true;
  return false;
}

// The exact effect of ignoring packing: the expectation with position ids that never break (each
// row one continuous run), compared to the real one.
bool packing_changes_answer(const PreparedCase& pc) {
  cases::TensorMap in;
  bool had_positions = false;
  for (const cases::Tensor& t : pc.inputs.all()) {
    cases::Tensor copy = t;
    if (t.name() == "position_ids") {
      had_positions = true;
      const int64_t rows = pc.c.op() == "segments" ? t.shape()[0] : t.shape()[1];
      const int64_t len = t.shape().back();
      const int64_t start = pc.c.op() == "segments" ? 0 : pc.c.get_int("offset");
      for (int64_t i = 0; i < rows * len; ++i)  // row 0 decides (multimodal ids)
        copy.as<int64_t>()[i] = start + i % len;
    }
    in.add(std::move(copy));
  }
  if (!had_positions) return false;
  return operation_for(pc.c).oracle(pc.c, in) != pc.expected;
}

std::map<Verdict, int> run_on_all(
    Backend& b, const std::function<void(const PreparedCase&, const CaseResult&)>& check) {
  std::map<Verdict, int> counts;
  for (const PreparedCase& pc : prepared_gate_cases()) {
    const CaseResult r = run_case(pc, b);
    ++counts[r.verdict];
    check(pc, r);
  }
  return counts;
}

TEST(MaskCases, SuitesCoverEveryOpPatternCacheModeAndPacking) {
  std::set<std::string> ops, patterns, caches, packing, paddings;
  for (const PreparedCase& pc : prepared_gate_cases()) {
    ops.insert(pc.c.op());
    if (pc.c.op() == "segments") continue;
    if (pc.c.op() == "layers") patterns.insert(pc.c.get("pattern"));
    caches.insert(pc.c.get("cache"));
    packing.insert(pc.c.get("packed"));
    paddings.insert(pc.c.get("padding"));
  }
  EXPECT_EQ(ops, (std::set<std::string>{"mask", "layers", "segments"}));
  for (const char* p : {"qwen35", "hybrid3", "all-linear", "all-full"})
    EXPECT_TRUE(patterns.count(p)) << p;
  EXPECT_EQ(caches, (std::set<std::string>{"none", "dynamic", "static", "chunked"}));
  EXPECT_EQ(packing, (std::set<std::string>{"none", "packed", "mrope"}));
  EXPECT_EQ(paddings, (std::set<std::string>{"none", "left", "right"}));
}

TEST(MaskCases, CpuBuilderPassesEveryGateCase) {
  auto cpu = make_backend("cpu");
  const auto counts = run_on_all(*cpu, [](const PreparedCase& pc, const CaseResult& r) {
    EXPECT_EQ(r.verdict, Verdict::kPass) << pc.c.id() << ": " << r.message;
  });
  EXPECT_GT(counts.at(Verdict::kPass), 300);
}

TEST(MaskCases, NoLinearRuleIsAnErrorNamingTheType) {
  auto b = make_backend("wrong:mask-no-linear-rule");
  const auto counts = run_on_all(*b, [](const PreparedCase& pc, const CaseResult& r) {
    if (pattern_has_linear(pc.c)) {
      EXPECT_EQ(r.verdict, Verdict::kError) << pc.c.id();
      EXPECT_NE(r.message.find("'linear_attention"), std::string::npos) << r.message;
    } else {
      EXPECT_EQ(r.verdict, Verdict::kPass) << pc.c.id() << ": " << r.message;
    }
  });
  EXPECT_GT(counts.at(Verdict::kError), 100);
}

TEST(MaskCases, IgnoringPackingFailsWhereverPackingMatters) {
  auto b = make_backend("wrong:mask-ignore-packing");
  const auto counts = run_on_all(*b, [](const PreparedCase& pc, const CaseResult& r) {
    const Verdict expected = packing_changes_answer(pc) ? Verdict::kFail : Verdict::kPass;
    EXPECT_EQ(r.verdict, expected) << pc.c.id() << ": " << r.message;
  });
  EXPECT_GT(counts.at(Verdict::kFail), 100);
}

TEST(MaskCases, StaticMasksSizedByUsedLengthFail) {
  auto b = make_backend("wrong:mask-static-by-used-length");
  const auto counts = run_on_all(*b, [](const PreparedCase& pc, const CaseResult& r) {
    // Every static case with an attention mask: the unwritten slots become visible.
    const bool attention = pc.c.op() == "mask" || pattern_has(pc.c, "full_attention") ||
                           pattern_has(pc.c, "sliding_attention") ||
                           pattern_has(pc.c, "chunked_attention");
    const bool affected = pc.c.op() != "segments" && pc.c.get("cache") == "static" && attention;
    EXPECT_EQ(r.verdict, affected ? Verdict::kFail : Verdict::kPass)
        << pc.c.id() << ": " << r.message;
  });
  EXPECT_GT(counts.at(Verdict::kFail), 60);
}

TEST(MaskCases, MismatchNamesTheElementAndTheRule) {
  const PreparedCase pc = prepare(Case::parse("mask(q=12,packed=packed,seed=3)"));
  auto b = make_backend("wrong:mask-ignore-packing");
  const CaseResult r = run_case(pc, *b);
  ASSERT_EQ(r.verdict, Verdict::kFail);
  EXPECT_NE(r.message.find("of 'mask' differ; first at (b=0, q="), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("reference says masked by segment (kv "), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("expected 0 got 1"), std::string::npos) << r.message;

  const PreparedCase st = prepare(Case::parse("mask(q=4,kv=9,cache=static,window=3)"));
  auto s = make_backend("wrong:mask-static-by-used-length");
  const CaseResult rs = run_case(st, *s);
  ASSERT_EQ(rs.verdict, Verdict::kFail);
  EXPECT_NE(rs.message.find("(b=0, q=0, kv=4): reference says masked by causal (kv 4 > q_abs 0)"),
            std::string::npos)
      << rs.message;

  const PreparedCase ly = prepare(Case::parse("layers(pattern=hybrid3,q=6,kv=10,cache=static)"));
  const CaseResult rl = run_case(ly, *s);
  ASSERT_EQ(rl.verdict, Verdict::kFail);
  EXPECT_NE(rl.message.find("of 'sliding_attention' differ; first at (b=0, q=0, kv=6): reference "
                            "says masked by causal"),
            std::string::npos)
      << rl.message;
}

TEST(MaskCases, DescribesEveryOutputKind) {
  const Case c = Case::parse("layers(pattern=qwen35,B=2,q=6,offset=3,cache=chunked,padding=right)");
  const PreparedCase pc = prepare(c);
  const Operation& op = operation_for(c);
  EXPECT_EQ(op.describe_element(c, pc.inputs, "layer_to_mask", 3),
            "layer 3 (full_attention): reference says mask 1");
  EXPECT_NE(op.describe_element(c, pc.inputs, "mask_kind", 0)
                .find("layer type 'linear_attention': reference says a validity mask"),
            std::string::npos);
  EXPECT_EQ(op.describe_element(c, pc.inputs, "linear_attention", 5),
            "(b=0, q=5): reference says token padding");
  const Case m = Case::parse("mask(q=1,kv=8,cache=static)");
  const PreparedCase pm = prepare(m);
  EXPECT_EQ(operation_for(m).describe_element(m, pm.inputs, "needed", 0),
            "needed flag: reference says a mask is needed (static cache: masks are always built)");
}

// A builder whose answer cannot fill the outputs (a validity mask for an attention layer) is an
// error, not a crash or a silent pass.
struct ValidityForEverythingApi : CpuMaskApi {
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    if (Status s = kernels::cpu::layer_masks(types, p, out); !s.ok()) return s;
    for (auto& m : out->masks) {
      m.kind = LayerMaskKind::kValidity;
      m.mask.assign(static_cast<size_t>(p.batch * p.q_len), 1);
    }
    return Status::Ok();
  }
};

class ValidityForEverything : public Backend {
 public:
  std::string name() const override { return "test:validity-for-everything"; }
  std::string description() const override { return ""; }
  Support supports(const Case&) const override { return Support::Yes(); }
  Status run(const Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return run_mask_case_with<ValidityForEverythingApi>(c, in, out);
  }
};

TEST(MaskCases, MalformedBuilderOutputIsAnError) {
  ValidityForEverything b;
  const CaseResult r = run_case(prepare(Case::parse("layers(pattern=all-full,q=4)")), b);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("malformed layer masks: 'full_attention' mask has 4 elements"),
            std::string::npos)
      << r.message;
}

TEST(MaskCases, SegmentsMismatchIsAFailNamingTheToken) {
  auto b = make_backend("wrong:mask-ignore-packing");
  const CaseResult r =
      run_case(prepare(Case::parse("segments(source=position,B=2,T=16,seed=4)")), *b);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_NE(r.message.find("of 'sequence_index' differ; first at token "), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("(starts a sequence)"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace deltacheck::backends
