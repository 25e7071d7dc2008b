// The gdr_grad operation: case ids and decoding, forward inputs bit-identical to the gdr case's,
// the padding tail, the oracle against complex-step differentiation of a forward written here
// on the operation's own inputs, and the baselines' arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/gdr_grad/params.h"
#include "ops/registry.h"
#include "reference/gated_delta_rule_backward.h"
#include "tests/reference/complex_step.h"

namespace deltacheck::ops {
namespace {

using cases::Case;
using cases::Tensor;
using cases::TensorMap;

const char* kTiny =
    "gdr_grad(layout=packed[3,0,2],H=1,HV=2,K=3,V=2,gate=strong,state=rand,dht=rand,tail=2,"
    "seed=5)";

TEST(GdrGradCase, DecodesAndRoundTrips) {
  const Case c = Case::parse(kTiny);
  EXPECT_EQ(Case::parse(c.id()).id(), c.id());
  const gdr_grad::Params p = gdr_grad::decode(c);
  EXPECT_TRUE(p.dht);
  EXPECT_TRUE(p.dh0());
  EXPECT_EQ(p.tail, 2);
  EXPECT_EQ(p.tokens(), 5);
  EXPECT_EQ(p.rule.T, 7);
  EXPECT_EQ(p.rule.N, 3);
  EXPECT_EQ(p.rule.HV, 2);
  EXPECT_EQ(gdr_grad::forward_case(c).id(),
            "gdr(layout=packed[3,0,2],H=1,HV=2,K=3,V=2,dtype=fp32,gate=strong,beta=rand,"
            "keys=norm,l2=1,state=rand,cache=prefill,calls=3,seed=5)");
  // Defaults: no dht, no tail; no dh0 without an initial state.
  const gdr_grad::Params d = gdr_grad::decode(Case::parse("gdr_grad(state=none)"));
  EXPECT_FALSE(d.dht);
  EXPECT_EQ(d.tail, 0);
  EXPECT_FALSE(d.dh0());
  EXPECT_THROW(gdr_grad::decode(Case::parse("gdr()")), std::invalid_argument);
}

TEST(GdrGradCase, RejectsBadIds) {
  EXPECT_THROW(Case::parse("gdr_grad(layout=single[8],tail=3)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(layout=batch[2x8],tail=1)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(H=3,HV=4)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(cache=none)"), cases::CaseIdError);  // not a grad parameter
  EXPECT_THROW(Case::parse("gdr_grad(dht=maybe)"), cases::CaseIdError);
}

// The forward inputs are the gdr prefill case's, bit for bit, for every suite case (salted too);
// the tail only appends token rows.
TEST(GdrGradCase, ForwardInputsAreTheGdrCasesBitForBit) {
  int checked = 0;
  for (const Case& c : cases::suite("gate")) {
    if (c.op() != "gdr_grad") continue;
    for (const bool salted : {false, true}) {
      cases::GenOptions o;
      if (salted) o.sequence_salt[1] = 77;
      const TensorMap grad = cases::generate_inputs(c, o);
      const TensorMap fwd = cases::generate_inputs(gdr_grad::forward_case(c), o);
      for (const Tensor& t : fwd.all()) {
        const Tensor* u = grad.find(t.name());
        ASSERT_NE(u, nullptr) << c.id() << " " << t.name();
        ASSERT_GE(u->nbytes(), t.nbytes());
        EXPECT_EQ(std::memcmp(u->data(), t.data(), t.nbytes()), 0) << c.id() << " " << t.name();
        if (t.name() == "cu_seqlens" || t.name() == "initial_state") {
          EXPECT_EQ(u->shape(), t.shape()) << c.id();
        }
      }
      EXPECT_NE(grad.find("do"), nullptr);
      EXPECT_EQ(grad.find("dht") != nullptr, gdr_grad::decode(c).dht) << c.id();
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

// Sequence-wise generation: salting sequence 1 changes its do and dht and nothing of the others.
TEST(GdrGradCase, DoAndDhtFollowTheSequenceSalt) {
  const Case c = Case::parse("gdr_grad(layout=packed[4,3,5],K=4,V=4,H=1,HV=1,dht=rand)");
  cases::GenOptions salted;
  salted.sequence_salt[1] = 9;
  const TensorMap a = cases::generate_inputs(c, {}), b = cases::generate_inputs(c, salted);
  const Tensor &da = a.at("do"), &db = b.at("do");
  for (int64_t i = 0; i < da.numel(); ++i) {
    const int64_t token = i / 4;
    EXPECT_EQ(da.get(i) != db.get(i), token >= 4 && token < 7) << i;
  }
  const Tensor &ha = a.at("dht"), &hb = b.at("dht");
  for (int64_t i = 0; i < ha.numel(); ++i) EXPECT_EQ(ha.get(i) != hb.get(i), i / 16 == 1) << i;
}

// The loss sum(do * o) + sum(dht * S_final) over the case's own tensors, by the recurrence in
// scalar type T written here (the forward of tests/reference/complex_step.h).
template <typename T>
T loss(const gdr_grad::Params& p, const std::vector<T>& q, const std::vector<T>& k,
       const std::vector<T>& v, const std::vector<T>& g, const std::vector<T>& beta,
       const std::vector<T>& h0, const std::vector<double>& dout, const std::vector<double>& dht) {
  const gdr::Params& d = p.rule;
  const auto cu = d.layout.cu_seqlens();
  const int64_t K = d.K, V = d.V, group = d.HV / d.H;
  T total = T(0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t hv = 0; hv < d.HV; ++hv) {
      std::vector<T> S(h0.begin() + (n * d.HV + hv) * K * V,
                       h0.begin() + (n * d.HV + hv + 1) * K * V);
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        const int64_t qk = (t * d.H + hv / group) * K, tok = t * d.HV + hv;
        std::vector<T> qn(q.begin() + qk, q.begin() + qk + K),
            kn(k.begin() + qk, k.begin() + qk + K);
        test_support::l2_normalize(qn);
        test_support::l2_normalize(kn);
        std::vector<T> o(static_cast<size_t>(V));
        test_support::delta_rule_token(S, qn, kn, &v[tok * V], g[tok], beta[tok],
                                       1.0 / std::sqrt(double(K)), K, V, o.data());
        for (int64_t j = 0; j < V; ++j) total += T(dout[tok * V + j]) * o[j];
      }
      for (int64_t e = 0; e < K * V; ++e) total += T(dht[(n * d.HV + hv) * K * V + e]) * S[e];
    }
  return total;
}

TEST(GdrGradOracle, AgreesWithComplexStepOnTheCasesInputs) {
  const Case c = Case::parse(kTiny);
  const gdr_grad::Params p = gdr_grad::decode(c);
  const TensorMap in = cases::generate_inputs(c, {});
  const Values oracle = operation_for(c).oracle(c, in);
  using test_support::lift;
  std::vector<test_support::Complex> q = lift(in.at("q").to_double()),
                                     k = lift(in.at("k").to_double()),
                                     v = lift(in.at("v").to_double()),
                                     g = lift(in.at("g").to_double()),
                                     beta = lift(in.at("beta").to_double()),
                                     h0 = lift(in.at("initial_state").to_double());
  const std::vector<double> dout = in.at("do").to_double(), dht = in.at("dht").to_double();
  auto grad = [&](std::vector<test_support::Complex>& x) {
    return test_support::complex_step_gradient(
        x, [&] { return loss(p, q, k, v, g, beta, h0, dout, dht); });
  };
  test_support::Disagreement d;
  d.add("dq", oracle.at("dq"), grad(q));
  d.add("dk", oracle.at("dk"), grad(k));
  d.add("dv", oracle.at("dv"), grad(v));
  d.add("dg", oracle.at("dg"), grad(g));
  d.add("dbeta", oracle.at("dbeta"), grad(beta));
  d.add("dh0", oracle.at("dh0"), grad(h0));
  EXPECT_LT(d.worst, 1e-10) << d.tensor;
  // The tail's gradients are exactly zero, and the zero-length sequence hands its dht back.
  for (const char* name : {"dq", "dk", "dv", "dg", "dbeta"}) {
    const std::vector<double>& x = oracle.at(name);
    const size_t per = x.size() / 7;
    for (size_t i = 5 * per; i < x.size(); ++i) EXPECT_EQ(x[i], 0.0) << name << " " << i;
  }
  const int64_t per = 2 * 3 * 2;
  for (int64_t i = 0; i < per; ++i) EXPECT_EQ(oracle.at("dh0")[per + i], dht[per + i]);
}

TEST(GdrGradOracle, OutputsSlicesAndTail) {
  const Case c = Case::parse(kTiny);
  const Operation& op = operation_for(c);
  const std::vector<OutputSpec> outs = op.outputs(c);
  ASSERT_EQ(outs.size(), 6u);
  EXPECT_EQ(outs[0].name, "dq");
  EXPECT_EQ(outs[0].shape, (std::vector<int64_t>{1, 7, 1, 3}));
  EXPECT_EQ(outs[3].name, "dg");
  EXPECT_EQ(outs[3].dtype, cases::DType::kF32);
  EXPECT_EQ(outs[5].name, "dh0");
  EXPECT_EQ(outs[5].shape, (std::vector<int64_t>{3, 2, 3, 2}));
  // Tokens 5 and 6 (the tail) must come back bit-identical to the oracle's zeros.
  ASSERT_EQ(outs[2].must_be_unchanged.size(), 1u);
  EXPECT_EQ(outs[2].must_be_unchanged[0].begin, 5 * 2 * 2);
  EXPECT_EQ(outs[2].must_be_unchanged[0].end, 7 * 2 * 2);
  EXPECT_TRUE(outs[5].must_be_unchanged.empty());
  const std::vector<SeqSlice> dv = op.slices(c, "dv");
  ASSERT_EQ(dv.size(), 3u);
  EXPECT_EQ(dv[1].begin, dv[1].end);  // the zero-length sequence
  EXPECT_EQ(dv[2].begin, 3 * 4);
  EXPECT_EQ(dv[2].end, 5 * 4);
  EXPECT_EQ(op.slices(c, "dh0")[2].begin, 2 * 12);
  EXPECT_FALSE(op.repackable(c));  // tail: judged without the probes
  EXPECT_TRUE(op.repackable(Case::parse("gdr_grad(layout=packed[3,4])")));
  EXPECT_TRUE(op.carried_states(c).empty());  // no split probe
}

// The baselines: the same backward in fp32 (with bf16 operands for a bf16 case), near the oracle
// but not equal to it; the FP64 arithmetic without rounding gives the oracle's bits.
TEST(GdrGradOracle, BaselinesAreTheBackwardInTheCasesPrecision) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const Case c = Case::parse(std::string("gdr_grad(layout=packed[63,0,65],K=16,V=16,dtype=") +
                               dtype + ",dht=rand)");
    const TensorMap in = cases::generate_inputs(c, {});
    const Operation& op = operation_for(c);
    const Values oracle = op.oracle(c, in);
    const std::vector<Baseline> bs = op.baselines(c, in, MatmulPrecision::kDefault);
    ASSERT_EQ(bs.size(), std::string(dtype) == "fp32" ? 1u : 2u);
    for (const Baseline& b : bs)
      for (const auto& [name, ref] : oracle) {
        double num = 0, den = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          num += (b.values.at(name)[i] - ref[i]) * (b.values.at(name)[i] - ref[i]);
          den += ref[i] * ref[i];
        }
        const double rel = std::sqrt(num / den);
        EXPECT_GT(rel, 0.0) << b.name << " " << name;
        EXPECT_LT(rel, std::string(dtype) == "fp32" ? 1e-5 : 2e-2) << b.name << " " << name;
      }
  }
  const Case c = Case::parse("gdr_grad(layout=packed[5,9],K=8,V=8,dht=rand)");
  const TensorMap in = cases::generate_inputs(c, {});
  std::vector<std::vector<double>> buffers;
  const reference::GatedDeltaRuleArgs a =
      gdr::reference_args(gdr_grad::decode(c).rule, in, buffers);
  const std::vector<double> dout = in.at("do").to_double(), dht = in.at("dht").to_double();
  const auto exact = reference::gated_delta_rule_backward(a, dout.data(), dht.data());
  const auto fp64 =
      reference::gated_delta_rule_backward(a, dout.data(), dht.data(), reference::Arithmetic{});
  EXPECT_EQ(fp64.dq, exact.dq);
  EXPECT_EQ(fp64.dg, exact.dg);
  EXPECT_EQ(fp64.dh0, exact.dh0);
  reference::Arithmetic chunked;
  chunked.form = reference::Formulation::kChunked;
  EXPECT_THROW(reference::gated_delta_rule_backward(a, dout.data(), dht.data(), chunked),
               std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::ops
