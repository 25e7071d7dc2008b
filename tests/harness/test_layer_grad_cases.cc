// The layer_grad operation through the harness: the CPU layer backward passes every gate case
// (probes included), and each deliberately wrong conv backward gets the verdict a kernel author
// would give it: dweight over the wrong rows is a fail (a sum over every sequence belongs to none),
// the conv's context gradient carried into the previous sequence a leak.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/layer_grad/params.h"

namespace deltacheck::backends {
namespace {

std::vector<cases::Case> layer_grad_cases(const std::string& suite) {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::suite(suite))
    if (c.op() == "layer_grad") out.push_back(c);
  return out;
}

int64_t non_empty(const ops::layer_grad::Params& p) {
  int64_t n = 0;
  for (int64_t l : p.layer.layout.lengths) n += l > 0;
  return n;
}

TEST(LayerGradCases, SuitesHoldTheirCases) {
  EXPECT_EQ(layer_grad_cases("smoke").size(), 1u);
  // 13 and 20, and the input regimes' 2 and 9 (seeds 800 on, ops/layer_grad/case.cc).
  EXPECT_EQ(layer_grad_cases("gate").size(), 15u);
  EXPECT_EQ(layer_grad_cases("full").size(), 29u);
}

TEST(LayerGradCases, CpuBackwardPassesTheGate) {
  auto cpu = make_backend("cpu");
  for (const cases::Case& c : layer_grad_cases("gate")) {
    const CaseResult r = run_case(prepare(c), *cpu, true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
  }
}

// dweight is a sum over every sequence: wrong rows read fail (no sequence to blame), with every
// other gradient right; where one sequence holds every token its rows are the right ones.
TEST(LayerGradCases, DweightOverTheWrongRowsFails) {
  auto wrong = make_backend("wrong:grad-conv-dweight-rows");
  std::map<Verdict, int> n;
  for (const cases::Case& c : layer_grad_cases("gate")) {
    const CaseResult r = run_case(prepare(c), *wrong, true);
    ++n[r.verdict];
    if (non_empty(ops::layer_grad::decode(c)) < 2) {
      EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
      continue;
    }
    EXPECT_EQ(r.verdict, Verdict::kFail) << c.id() << ": " << r.message;
    for (const TensorReport& t : r.tensors)
      EXPECT_EQ(t.ok, t.name != "dconv_weight") << c.id() << " " << t.name;
  }
  EXPECT_EQ(n[Verdict::kPass], 2);   // single[64]; packed[16,0] with a tail
  EXPECT_EQ(n[Verdict::kFail], 13);  // 11, and the 2 regime cases (tinyqk, corrk)
}

// The context gradient of sequence s + 1 lands in sequence s: wrong in the pack, right alone, a
// leak (tail cases too: their sequences are repacked without the tail); one sequence has nothing
// to carry.
TEST(LayerGradCases, ConvStateGradientCarriedAcrossABoundaryIsALeak) {
  auto wrong = make_backend("wrong:grad-conv-state-carry");
  std::map<Verdict, int> n;
  for (const cases::Case& c : layer_grad_cases("gate")) {
    const ops::layer_grad::Params p = ops::layer_grad::decode(c);
    const CaseResult r = run_case(prepare(c), *wrong, true);
    ++n[r.verdict];
    EXPECT_EQ(r.verdict, p.layer.N < 2 ? Verdict::kPass : Verdict::kLeak)
        << c.id() << ": " << r.message;
    if (p.tail > 0) {
      EXPECT_NE(r.message.find("right alone"), std::string::npos) << c.id() << ": " << r.message;
    }
  }
  EXPECT_EQ(n[Verdict::kPass], 1);
  EXPECT_EQ(n[Verdict::kLeak], 14);  // 12, and the 2 regime cases
}

// The alone confirmation judges a piece's summed gradients against the piece's own expectation
// (not a cut of the pack's): the cpu backward passes every sequence of a pack run alone.
TEST(LayerGradCases, PiecesAreJudgedByTheirOwnWeightGradients) {
  const cases::Case c =
      cases::Case::parse("layer_grad(layout=packed[5,0,40],state=rand,dht=rand,dconv=rand,seed=3)");
  const PreparedCase pc = prepare(c);
  auto cpu = make_backend("cpu");
  for (int64_t s : {0, 2}) {
    const PreparedCase alone = prepare_pieces(pc, {{s, 0, s == 0 ? 5 : 40}});
    cases::TensorMap out = allocate_outputs(alone.outputs);
    ASSERT_TRUE(cpu->run(alone.c, alone.inputs, out).ok());
    const CaseResult r = judge(alone, out, "cpu");
    EXPECT_EQ(r.verdict, Verdict::kPass) << s << ": " << r.message;
    EXPECT_NE(alone.expected.at("dconv_weight"), pc.expected.at("dconv_weight"));
  }
}

}  // namespace
}  // namespace deltacheck::backends
