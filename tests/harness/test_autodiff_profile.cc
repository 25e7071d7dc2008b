// The precision profile autodiff=act (docs/tolerance.md, "autodiff=act"): it is spelled and read
// as the other choices, adds the activation-dtype-graph backward to the bf16 / fp16 gradient
// baselines only (fp32 cases and the forward's baselines are unchanged), and a declared one is
// judged against it: the baseline itself passes its own case declared, and an fp32-state
// implementation (the cpu backend) still passes with the profile (a loosening, never tighter).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/case.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/precision.h"

namespace deltacheck::backends {
namespace {

using reference::Rounding;

bool has_graph(const std::vector<reference::Arithmetic>& v, Rounding r) {
  return std::any_of(v.begin(), v.end(),
                     [r](const reference::Arithmetic& a) { return a.graph == r; });
}

TEST(AutodiffProfile, ReadAndSpelledLikeTheOtherChoices) {
  const ops::PrecisionProfile p = ops::profile_from_name("autodiff=act");
  EXPECT_TRUE(p.autodiff_act);
  EXPECT_EQ(ops::profile_name(p), "autodiff=act");
  EXPECT_EQ(ops::profile_name(ops::profile_from_name("chunk=128,autodiff=act")),
            "chunk=128,autodiff=act");
  EXPECT_FALSE(ops::profile_from_name("autodiff=fp32").autodiff_act);
  EXPECT_TRUE(ops::merged(ops::PrecisionProfile{}, p).autodiff_act);
  try {
    ops::profile_from_name("autodiff=bf16");
    ADD_FAILURE() << "autodiff=bf16 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("autodiff=act"), std::string::npos) << e.what();
  }
}

TEST(AutodiffProfile, AddsTheGraphBaselineToLowPrecisionGradientsOnly) {
  const ops::PrecisionProfile p = ops::profile_from_name("autodiff=act");
  EXPECT_TRUE(has_graph(ops::grad_baselines(cases::DType::kBF16, p), Rounding::kBF16));
  EXPECT_TRUE(has_graph(ops::grad_baselines(cases::DType::kF16, p), Rounding::kF16));
  EXPECT_FALSE(has_graph(ops::grad_baselines(cases::DType::kBF16, {}), Rounding::kBF16));
  EXPECT_EQ(ops::grad_baselines(cases::DType::kF32, p).size(),
            ops::grad_baselines(cases::DType::kF32, {}).size());
  EXPECT_EQ(ops::rule_baselines(cases::DType::kBF16, p).size(),
            ops::rule_baselines(cases::DType::kBF16, {}).size());
}

// The cpu backend, declaring autodiff=act.
class DeclaringAutodiff : public Backend {
 public:
  std::string name() const override { return "cpu@autodiff=act"; }
  std::string description() const override { return "test"; }
  PrecisionProfile precision_profile() const override {
    return ops::profile_from_name("autodiff=act");
  }
  Support supports(const cases::Case& c) const override { return cpu_->supports(c); }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return cpu_->run(c, in, out);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_backend("cpu");
};

TEST(AutodiffProfile, ADeclaredFp32StateBackwardStillPassesAndIsShownDeclared) {
  DeclaringAutodiff b;
  for (const char* id : {"gdr_grad(layout=packed[63,0,65],H=2,HV=4,K=32,V=32,dtype=bf16,"
                         "gate=strong,dht=rand,seed=2)",
                         "layer_grad(layout=packed[15,0,17],dtype=bf16,seed=700)"}) {
    const cases::Case c = cases::Case::parse(id);
    const CaseResult r = run_case(prepare(c), b, false);
    EXPECT_EQ(r.verdict, Verdict::kPass) << id << ": " << r.message;
    EXPECT_EQ(r.precision, "autodiff=act") << id;
    const std::vector<Baseline> bs =
        case_baselines(c, prepare(c).inputs, ops::profile_from_name("autodiff=act"));
    bool named = false;
    for (const Baseline& x : bs)
      named = named || x.name.find("autodiff through a bf16 graph") != std::string::npos;
    EXPECT_TRUE(named) << id;
  }
}

}  // namespace
}  // namespace deltacheck::backends
