// The oracle-free probes: silent on the CPU kernel, and they catch leaks bit-exactly, including
// leaks too small for the oracle comparison to see.
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/probes.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

Verdict probe(const std::vector<ProbeReport>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return p.verdict;
  return Verdict::kSkipped;
}

TEST(Probes, AllPassOnTheCpuKernel) {
  auto cpu = make_backend("cpu");
  for (const cases::Case& c : cases::suite("smoke")) {
    if (c.op() != "gdr" || !operation_for(c).repackable(c)) continue;
    const CaseResult r = run_case(prepare(c), *cpu, true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    EXPECT_FALSE(r.probes.empty()) << c.id();
    for (const auto& p : r.probes) EXPECT_EQ(p.verdict, Verdict::kPass) << c.id() << " " << p.name;
  }
}

// A token-by-token recurrence computes each token the same way however its sequence is cut: the
// split's two calls give the one-shot bits, judged by the case's own comparison (no split
// tolerance to compute); the chunked CPU kernel restarts its chunk grid at the cut and is judged
// against the split's tolerance.
std::string split_detail(const std::string& backend, const cases::Case& c) {
  auto b = make_backend(backend);
  const CaseResult r = run_case(prepare(c), *b, true);
  EXPECT_EQ(r.verdict, Verdict::kPass) << backend << ": " << r.message;
  for (const auto& p : r.probes)
    if (p.name == "split") {
      EXPECT_EQ(p.verdict, Verdict::kPass) << backend << ": " << p.detail;
      return p.detail;
    }
  ADD_FAILURE() << backend << ": no split probe";
  return "";
}

TEST(Probes, ASplitWithTheOneShotBitsIsJudgedByTheOneShotComparison) {
  const cases::Case c = cases::Case::parse("gdr(layout=packed[100,37,130],HV=4,seed=5)");
  EXPECT_EQ(split_detail("right:recurrent", c), "bit-identical to the one-shot run");
  EXPECT_EQ(split_detail("cpu", c), "");  // within the split's own tolerance
}

TEST(Probes, IgnoringCuSeqlensIsALeakForIsolationAloneAndOrder) {
  auto leaky = make_backend("wrong:ignore-cu-seqlens");
  int seen = 0;
  for (const cases::Case& c : cases::suite("smoke")) {
    if (c.op() != "gdr" || (c.get("cache") != "prefill" && c.get("cache") != "none")) continue;
    const cases::Layout L = cases::Layout::parse(c.get("layout"));
    if (!L.has_cu_seqlens() || c.get("gate") == "tail") continue;
    const PreparedCase pc = prepare(c);
    cases::TensorMap out = allocate_outputs(pc.outputs);
    ASSERT_TRUE(leaky->run(c, pc.inputs, out).ok());
    const auto ps = run_probes(pc, *leaky, out, judge(pc, out, leaky->name()));
    // With beta = 0 and strong decay the carried state underflows to zero: nothing of a
    // neighbour's inputs survives to be seen, but the sequence still starts from the wrong state.
    if (c.get("beta") != "zero") {
      EXPECT_EQ(probe(ps, "isolation"), Verdict::kLeak) << c.id();
    }
    EXPECT_EQ(probe(ps, "alone"), Verdict::kLeak) << c.id();
    EXPECT_EQ(probe(ps, "repeat"), Verdict::kPass) << c.id();
    ++seen;
  }
  EXPECT_GT(seen, 10);
}

TEST(Probes, ALeakBelowToleranceIsStillALeak) {
  // Strong decay hides the carried state from the oracle comparison in bf16 on this case (see
  // test_verdicts: exact bug below tolerance), but not from bit-exact isolation.
  const cases::Case c = cases::Case::parse(
      "gdr(layout=packed[300,500],H=2,HV=4,K=64,V=64,dtype=bf16,gate=strong,seed=50)");
  auto leaky = make_backend("wrong:ignore-cu-seqlens");
  const PreparedCase pc = prepare(c);
  EXPECT_EQ(run_case(pc, *leaky, false).verdict, Verdict::kPass);
  const CaseResult r = run_case(pc, *leaky, true);
  EXPECT_EQ(r.verdict, Verdict::kLeak) << r.message;
  EXPECT_NE(r.message.find("probe"), std::string::npos) << r.message;
}

TEST(Probes, DroppedInitialStateFailsAloneAndSplit) {
  auto wrong = make_backend("wrong:drop-initial-state");
  const PreparedCase pc = prepare(cases::Case::parse("gdr(layout=packed[40,70,3],seed=4)"));
  cases::TensorMap out = allocate_outputs(pc.outputs);
  ASSERT_TRUE(wrong->run(pc.c, pc.inputs, out).ok());
  const auto ps = run_probes(pc, *wrong, out, judge(pc, out, wrong->name()));
  EXPECT_EQ(probe(ps, "isolation"), Verdict::kPass);  // no sequence reads another
  EXPECT_EQ(probe(ps, "alone"), Verdict::kLeak);      // but its answer depends on its position
  EXPECT_EQ(probe(ps, "split"), Verdict::kFail);      // and a continued prefill restarts at zero
}

TEST(Probes, WithoutBatchInvarianceTheProbesJudgeWithTolerance) {
  // A leaky backend that does not claim batch invariance: alone/order/isolation compare each
  // sequence's two results with its tolerance instead of bit for bit, and still see the leak.
  class Loose : public Backend {
   public:
    explicit Loose(std::string inner) : inner_(make_backend(inner)) {}
    std::string name() const override { return "loose"; }
    std::string description() const override { return "test"; }
    bool batch_invariant(const cases::Case&) const override { return false; }
    Support supports(const cases::Case& c) const override { return inner_->supports(c); }
    Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
      return inner_->run(c, in, out);
    }

   private:
    std::unique_ptr<Backend> inner_;
  };
  const PreparedCase pc = prepare(cases::Case::parse("gdr(layout=packed[40,70,3],seed=4)"));
  Loose leaky("wrong:ignore-cu-seqlens"), right("cpu");
  cases::TensorMap out = allocate_outputs(pc.outputs);
  ASSERT_TRUE(leaky.run(pc.c, pc.inputs, out).ok());
  const auto bad = run_probes(pc, leaky, out, judge(pc, out, leaky.name()));
  EXPECT_EQ(probe(bad, "alone"), Verdict::kLeak);
  EXPECT_EQ(probe(bad, "isolation"), Verdict::kLeak);
  cases::TensorMap good_out = allocate_outputs(pc.outputs);
  ASSERT_TRUE(right.run(pc.c, pc.inputs, good_out).ok());
  for (const auto& p : run_probes(pc, right, good_out, judge(pc, good_out, right.name())))
    EXPECT_EQ(p.verdict, Verdict::kPass) << p.name << ": " << p.detail;
}

TEST(Probes, ANonDeterministicBackendFailsRepeat) {
  class Flaky : public Backend {
   public:
    std::string name() const override { return "flaky"; }
    std::string description() const override { return "test"; }
    Support supports(const cases::Case&) const override { return Support::Yes(); }
    Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
      Status s = cpu_->run(c, in, out);
      if (++calls_ % 2 == 0) out.at("o").set(0, out.at("o").get(0) * (1 + 1e-6));
      return s;
    }

   private:
    std::unique_ptr<Backend> cpu_ = make_backend("cpu");
    int calls_ = 0;
  } flaky;
  const CaseResult r = run_case(prepare(cases::Case::parse("gdr(layout=single[20])")), flaky, true);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_EQ(probe(r.probes, "repeat"), Verdict::kFail);
}

}  // namespace
}  // namespace deltacheck::backends
