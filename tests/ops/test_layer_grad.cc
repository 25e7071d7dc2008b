// The layer_grad operation: case ids and decoding, forward inputs bit-identical to the layer
// case's, the padding tail and the upstream gradients per sequence, outputs and slices (the
// parameter gradients belong to no sequence), and the oracle and baselines on the case's inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/layer_grad/params.h"
#include "ops/registry.h"

namespace deltacheck::ops {
namespace {

using cases::Case;
using cases::Tensor;
using cases::TensorMap;

TEST(LayerGradCase, DecodesAndRoundTrips) {
  const Case c = Case::parse(
      "layer_grad(layout=packed[3,0,2],H=1,HV=2,K=3,V=2,state=rand,dht=rand,dconv=rand,tail=2,"
      "seed=5)");
  EXPECT_EQ(Case::parse(c.id()).id(), c.id());
  const layer_grad::Params p = layer_grad::decode(c);
  EXPECT_TRUE(p.dht);
  EXPECT_TRUE(p.dconv);
  EXPECT_TRUE(p.states());
  EXPECT_EQ(p.tail, 2);
  EXPECT_EQ(p.tokens(), 5);
  EXPECT_EQ(p.layer.T, 7);
  EXPECT_EQ(p.layer.N, 3);
  EXPECT_EQ(layer_grad::forward_case(c).op(), "layer");
  const layer_grad::Params d = layer_grad::decode(Case::parse("layer_grad(state=none)"));
  EXPECT_FALSE(d.dht);
  EXPECT_FALSE(d.dconv);
  EXPECT_FALSE(d.states());
  EXPECT_THROW(layer_grad::decode(Case::parse("layer()")), std::invalid_argument);
}

TEST(LayerGradCase, RejectsBadIds) {
  EXPECT_THROW(Case::parse("layer_grad(layout=single[8],tail=3)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("layer_grad(layout=batch[2x8])"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("layer_grad(H=3,HV=4)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("layer_grad(cache=none)"), cases::CaseIdError);  // not a parameter
  EXPECT_THROW(Case::parse("layer_grad(dconv=maybe)"), cases::CaseIdError);
}

// The forward inputs are the layer prefill case's, bit for bit, for every gate case (salted
// too); the tail only appends token rows.
TEST(LayerGradCase, ForwardInputsAreTheLayerCasesBitForBit) {
  int checked = 0;
  for (const Case& c : cases::suite("gate")) {
    if (c.op() != "layer_grad") continue;
    for (const bool salted : {false, true}) {
      cases::GenOptions o;
      if (salted) o.sequence_salt[1] = 77;
      const TensorMap grad = cases::generate_inputs(c, o);
      const TensorMap fwd = cases::generate_inputs(layer_grad::forward_case(c), o);
      for (const Tensor& t : fwd.all()) {
        const Tensor* u = grad.find(t.name());
        ASSERT_NE(u, nullptr) << c.id() << " " << t.name();
        ASSERT_GE(u->nbytes(), t.nbytes());
        EXPECT_EQ(std::memcmp(u->data(), t.data(), t.nbytes()), 0) << c.id() << " " << t.name();
      }
      const layer_grad::Params p = layer_grad::decode(c);
      EXPECT_EQ(grad.at("do").shape()[1], p.layer.T) << c.id();
      EXPECT_EQ(grad.find("dht") != nullptr, p.dht) << c.id();
      EXPECT_EQ(grad.find("dconv") != nullptr, p.dconv) << c.id();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 15);  // 13, and the 2 regime cases (seeds 800 on)
}

// Salting sequence 1 changes its do, dht and dconv and nothing of the others'.
TEST(LayerGradCase, UpstreamGradientsFollowTheSequenceSalt) {
  const Case c =
      Case::parse("layer_grad(layout=packed[4,3,5],H=1,HV=1,K=2,V=2,W=2,dht=rand,dconv=rand)");
  cases::GenOptions salted;
  salted.sequence_salt[1] = 9;
  const TensorMap a = cases::generate_inputs(c, {}), b = cases::generate_inputs(c, salted);
  const Tensor &da = a.at("do"), &db = b.at("do");
  for (int64_t i = 0; i < da.numel(); ++i)
    EXPECT_EQ(da.get(i) != db.get(i), i / 2 >= 4 && i / 2 < 7) << i;
  const Tensor &ha = a.at("dht"), &hb = b.at("dht");
  for (int64_t i = 0; i < ha.numel(); ++i) EXPECT_EQ(ha.get(i) != hb.get(i), i / 4 == 1) << i;
  const Tensor &ca = a.at("dconv"), &cb = b.at("dconv");  // D = 2*1*2 + 1*2 = 6, W-1 = 1
  for (int64_t i = 0; i < ca.numel(); ++i) EXPECT_EQ(ca.get(i) != cb.get(i), i / 6 == 1) << i;
}

// Outputs and their slices: per-token and per-sequence gradients split by sequence, the summed
// parameter gradients by none; the tail must come back zero; the oracle fills every output, the
// baselines sit near it but not on it.
TEST(LayerGradCase, OutputsSlicesOracleAndBaselines) {
  const Case c = Case::parse(
      "layer_grad(layout=packed[6,0,9],H=1,HV=2,K=4,V=4,dtype=bf16,state=rand,dht=rand,"
      "dconv=rand,tail=3,seed=2)");
  const Operation& op = operation_for(c);
  const TensorMap in = cases::generate_inputs(c, {});
  const Values want = op.oracle(c, in);
  const std::vector<Baseline> bs = op.baselines(c, in, MatmulPrecision::kDefault);
  ASSERT_EQ(bs.size(), 4u);  // fp32 recurrence, fp32 chunked; both with bf16 operands
  for (const OutputSpec& s : op.outputs(c)) {
    ASSERT_TRUE(want.count(s.name)) << s.name;
    int64_t numel = 1;
    for (int64_t x : s.shape) numel *= x;
    EXPECT_EQ(static_cast<int64_t>(want.at(s.name).size()), numel) << s.name;
    const auto sl = op.slices(c, s.name);
    const bool summed = op.major(s.name) == TensorMajor::kNone;
    EXPECT_EQ(sl.empty(), summed) << s.name;
    if (!summed) {
      EXPECT_EQ(sl.size(), 3u) << s.name;
    }
    const bool per_token = s.name == "dqkv" || s.name == "dz" || s.name == "da" || s.name == "db";
    EXPECT_EQ(!s.must_be_unchanged.empty(), per_token) << s.name;
    for (const ElementRange& r : s.must_be_unchanged)
      for (int64_t i = r.begin; i < r.end; ++i) ASSERT_EQ(want.at(s.name)[i], 0.0) << s.name;
    double num = 0, den = 0;
    for (size_t i = 0; i < want.at(s.name).size(); ++i) {
      const double e = bs[1].values.at(s.name)[i] - want.at(s.name)[i];
      num += e * e;
      den += want.at(s.name)[i] * want.at(s.name)[i];
    }
    const double rel = std::sqrt(num / den);
    EXPECT_GT(rel, 0.0) << s.name;
    EXPECT_LT(rel, 0.1) << s.name;
  }
  for (const char* name : {"dconv_weight", "dconv_bias", "dA_log", "ddt_bias", "dnorm_weight",
                           "dinitial_state", "dinitial_conv_state"})
    EXPECT_TRUE(want.count(name)) << name;
}

}  // namespace
}  // namespace deltacheck::ops
