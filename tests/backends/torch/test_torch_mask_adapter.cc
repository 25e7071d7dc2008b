// The LibTorch mask builder through its adapter (backends/torch/torch_mask_adapter.h):
// bit-exact on every mask, layers and segments case of the smoke and gate suites, and the same
// outputs as the CPU builder. Runs the adapter directly, so it does not depend on how the `torch`
// backend dispatches ops; when that backend takes mask cases, they must pass there too.
#include <gtest/gtest.h>

#include <set>

#include "backends/torch/torch_backend.h"
#include "backends/torch/torch_mask_adapter.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/mask/params.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

class TorchMaskAdapter : public Backend {
 public:
  std::string name() const override { return "test:torch-mask-adapter"; }
  std::string description() const override { return ""; }
  Support supports(const Case& c) const override {
    return torch_mask_supports(c) ? Support::Yes() : Support::No("not a mask op");
  }
  Status run(const Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return run_torch_mask_case(c, in, out);
  }
};

std::vector<Case> mask_cases() {
  std::vector<Case> out;
  std::set<std::string> seen;
  for (const char* s : {"smoke", "gate"})
    for (const Case& c : cases::suite(s))
      if (ops::mask::is_mask_op(c.op()) && seen.insert(c.id()).second) out.push_back(c);
  return out;
}

TEST(TorchMaskAdapter, SupportsExactlyTheMaskOps) {
  EXPECT_TRUE(torch_mask_supports(Case::parse("mask(q=4)")));
  EXPECT_TRUE(torch_mask_supports(Case::parse("layers(pattern=qwen35)")));
  EXPECT_TRUE(torch_mask_supports(Case::parse("segments(source=cu)")));
  EXPECT_FALSE(torch_mask_supports(Case::parse("gdr(layout=single[4])")));
}

TEST(TorchMaskAdapter, PassesEveryGateMaskCaseLikeTheCpuBuilder) {
  TorchMaskAdapter torch;
  auto cpu = make_backend("cpu");
  int passed = 0;
  for (const Case& c : mask_cases()) {
    const PreparedCase pc = prepare(c);
    const CaseResult r = run_case(pc, torch);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    passed += r.verdict == Verdict::kPass;
    // Same outputs, byte for byte, as the CPU builder.
    cases::TensorMap a = allocate_outputs(pc.outputs), b = allocate_outputs(pc.outputs);
    ASSERT_TRUE(run_torch_mask_case(c, pc.inputs, a).ok());
    ASSERT_TRUE(cpu->run(c, pc.inputs, b).ok());
    for (const cases::Tensor& t : a.all())
      EXPECT_EQ(t.storage(), b.at(t.name()).storage()) << c.id() << " " << t.name();
  }
  EXPECT_GT(passed, 300);
}

TEST(TorchMaskAdapter, TorchBackendRunsMaskCasesWhenItTakesThem) {
  register_torch_backends();
  auto backend = make_backend("torch");
  const Case c = Case::parse("layers(pattern=qwen35,q=24,kv=64,cache=static,padding=left)");
  if (!backend->supports(c).ok)
    GTEST_SKIP() << "the torch backend does not dispatch mask ops yet: "
                 << backend->supports(c).reason;
  const CaseResult r = run_case(prepare(c), *backend);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
}

}  // namespace
}  // namespace deltacheck::backends
