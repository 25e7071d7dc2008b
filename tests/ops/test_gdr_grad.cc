// The gdr_grad operation: case ids and decoding, forward inputs bit-identical to the gdr case's,
// the padding tail, the oracle against complex-step differentiation of a forward written here
// on the operation's own inputs, the baselines' arithmetic, and context-parallel (cp) cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/gdr_grad/context_parallel.h"
#include "ops/gdr_grad/params.h"
#include "ops/registry.h"
#include "ops/repack.h"
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
  // Probes and the leak confirmation run the sequences without the tail.
  EXPECT_TRUE(op.repackable(c));
  EXPECT_EQ(op.tail_rows(c), 2);
  EXPECT_EQ(op.tail_rows(Case::parse("gdr_grad(layout=packed[3,4])")), 0);
  EXPECT_TRUE(op.carried_states(c).empty());  // no split probe
}

// Repacking a case with a padding tail keeps the sequences' token rows, leaves the tail out and
// sets tail=0; token-major tensors that do not have the case's rows are refused.
TEST(GdrGradOracle, RepackingLeavesThePaddingTailOut) {
  const Case c = Case::parse(kTiny);
  const TensorMap in = cases::generate_inputs(c);
  ASSERT_EQ(ops::token_rows(c), 7);
  const ops::Repacked r = ops::repack(c, in, {{2, 0, 2}, {0, 1, 2}});
  EXPECT_EQ(r.c.get_int("tail"), 0);
  EXPECT_EQ(r.c.layout().total_tokens(), 4);
  const Tensor& q = in.at("q");
  const Tensor& rq = r.tensors.at("q");
  EXPECT_EQ(ops::token_rows(r.c), 4);
  const int64_t per = q.numel() / 7;
  EXPECT_EQ(rq.numel(), 4 * per);
  for (int64_t i = 0; i < 2 * per; ++i) {
    EXPECT_EQ(rq.get(i), q.get(3 * per + i));        // sequence 2's tokens (rows 3 and 4)
    EXPECT_EQ(rq.get(2 * per + i), q.get(per + i));  // sequence 0's tokens 1 and 2
  }
  TensorMap cut;
  for (const Tensor& t : in.all()) {
    if (t.name() != "q") {
      cut.add(t);
      continue;
    }
    std::vector<int64_t> shape = t.shape();
    shape[1] = 5;  // the tail's rows dropped by hand: no longer the case's 7 token rows
    cut.add(Tensor("q", t.dtype(), shape));
  }
  EXPECT_THROW(ops::repack(c, cut, {{0, 0, 1}}), std::invalid_argument);
}

// The baselines: the backward's recurrent and chunked forms in fp32, the chunked one also with
// exact cumulative sums for an fp32 case (and both with bf16 operands for a bf16 case), near the
// oracle but not equal to it; the FP64 arithmetic without rounding gives the oracle's bits, the
// FP64 chunked form its values to rounding.
TEST(GdrGradOracle, BaselinesAreTheBackwardInTheCasesPrecision) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const Case c = Case::parse(std::string("gdr_grad(layout=packed[63,0,65],K=16,V=16,dtype=") +
                               dtype + ",dht=rand)");
    const TensorMap in = cases::generate_inputs(c, {});
    const Operation& op = operation_for(c);
    const Values oracle = op.oracle(c, in);
    const std::vector<Baseline> bs = op.baselines(c, in, MatmulPrecision::kDefault);
    ASSERT_EQ(bs.size(), std::string(dtype) == "fp32" ? 3u : 4u);
    EXPECT_NE(bs[1].name.find("chunked fp32"), std::string::npos) << bs[1].name;
    if (std::string(dtype) == "fp32") {  // torch.cumsum's rounding of the cumulative gates
      EXPECT_NE(bs[2].name.find("chunked fp32, exact cumsum"), std::string::npos) << bs[2].name;
    }
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
  chunked.chunk_size = 4;  // cuts both sequences
  const auto fp64_chunked =
      reference::gated_delta_rule_backward(a, dout.data(), dht.data(), chunked);
  for (size_t i = 0; i < exact.dg.size(); ++i) EXPECT_NEAR(fp64_chunked.dg[i], exact.dg[i], 1e-12);
  for (size_t i = 0; i < exact.dq.size(); ++i) EXPECT_NEAR(fp64_chunked.dq[i], exact.dq[i], 1e-12);
  chunked.operands = reference::Rounding::kBF16;  // rounded operands move it, a little
  const auto lowp = reference::gated_delta_rule_backward(a, dout.data(), dht.data(), chunked);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < exact.dq.size(); ++i) {
    worst = std::max(worst, std::abs(lowp.dq[i] - exact.dq[i]));
    scale = std::max(scale, std::abs(exact.dq[i]));
  }
  EXPECT_GT(worst, 1e-6 * scale);
  EXPECT_LT(worst, 5e-2 * scale);
}

// cp=S is absent from the id at its default (every older id stays), part of it otherwise; the
// inputs are the unsplit case's, and each rank's call is a plain gdr_grad case of its pieces.
TEST(GdrGradContextParallel, IdsSplitAndRankCases) {
  const Case plain = Case::parse("gdr_grad(layout=packed[63,0,65],dht=none,seed=3)");
  EXPECT_EQ(plain.id().find("cp="), std::string::npos) << plain.id();
  EXPECT_FALSE(plain.has("cp"));
  EXPECT_EQ(Case::parse("gdr_grad(layout=packed[63,0,65],dht=none,cp=0,seed=3)").id(), plain.id());
  const Case c = Case::parse("gdr_grad(layout=packed[63,0,65],dht=none,cp=100,seed=3)");
  EXPECT_NE(c.id().find(",cp=100,"), std::string::npos) << c.id();
  EXPECT_EQ(Case::parse(c.id()).id(), c.id());
  EXPECT_EQ(gdr_grad::decode(c).cp, std::vector<int64_t>{100});
  EXPECT_TRUE(gdr_grad::decode(plain).cp.empty());
  EXPECT_EQ(gdr_grad::forward_case(c).id(), gdr_grad::forward_case(plain).id());
  const TensorMap a = cases::generate_inputs(c, {}), b = cases::generate_inputs(plain, {});
  for (const Tensor& t : b.all())
    EXPECT_EQ(std::memcmp(t.data(), a.at(t.name()).data(), t.nbytes()), 0) << t.name();
  const gdr_grad::CpSplit s = gdr_grad::cp_split(gdr_grad::decode(c)).value();
  ASSERT_EQ(s.ranks.size(), 2u);
  ASSERT_EQ(s.ranks[0].size(), 3u);  // seq 0, the empty seq 1, seq 2's first 37 tokens
  EXPECT_EQ(s.ranks[0][2].seq, 2);
  EXPECT_EQ(s.ranks[0][2].length, 37);
  ASSERT_EQ(s.ranks[1].size(), 1u);
  EXPECT_EQ(s.ranks[1][0].offset, 37);
  EXPECT_EQ(s.ranks[1][0].length, 28);
  const std::vector<Case> ranks = gdr_grad::rank_cases(c);
  ASSERT_EQ(ranks.size(), 2u);
  const Case &rank0 = ranks[0], &rank1 = ranks[1];
  EXPECT_EQ(rank0.get("layout"), "packed[63,0,37]");
  EXPECT_EQ(rank0.get("dht"), "rand");  // rank 1's dh0 comes in as dht
  EXPECT_EQ(rank1.get("layout"), "single[28]");
  EXPECT_EQ(rank1.get("state"), "rand");  // starts from the state at the cut
  EXPECT_FALSE(rank0.has("cp"));
  const Operation& op = operation_for(c);
  EXPECT_EQ(op.call_mode(c).kind, CallMode::Kind::kDriven);
  EXPECT_EQ(op.call_mode(plain).kind, CallMode::Kind::kOne);
  EXPECT_FALSE(op.repackable(c));
  const auto calls = op.driven_calls(c);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].first, "rank 1");  // the backward runs from the last rank
  EXPECT_EQ(calls[0].second.id(), rank1.id());
  EXPECT_NE(op.explain_failure(c, 2, 40).find("rank 1"), std::string::npos);
  EXPECT_NE(op.explain_failure(c, 2, 3).find("rank 0"), std::string::npos);
  EXPECT_NE(op.explain_failure(c, 2, -1).find("seq 2's dh0 came from rank 0"), std::string::npos);
  // A few cp cases in the fast suites.
  for (const auto& [suite, lo, hi] : {std::tuple{"smoke", 1, 1}, std::tuple{"gate", 5, 8}}) {
    int n = 0;
    for (const Case& g : cases::suite(suite))
      if (g.op() == "gdr_grad" && !gdr_grad::decode(g).cp.empty()) ++n;
    EXPECT_GE(n, lo) << suite;
    EXPECT_LE(n, hi) << suite;
  }
}

TEST(GdrGradContextParallel, RejectsCutsThatSplitNothing) {
  EXPECT_THROW(Case::parse("gdr_grad(layout=packed[63,0,65],cp=63)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(layout=packed[63,0,65],cp=128)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(layout=packed[63,0,65],cp=500)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(layout=batch[2x8],cp=3)"), cases::CaseIdError);
  EXPECT_THROW(Case::parse("gdr_grad(layout=packed[8,8],cp=3,tail=2)"), cases::CaseIdError);
  EXPECT_NO_THROW(Case::parse("gdr_grad(layout=single[8],cp=1)"));
  EXPECT_NO_THROW(Case::parse("gdr_grad(layout=packed[8,0,8],cp=15)"));
  // More ranks: ascending cuts, each inside a sequence, written canonically.
  EXPECT_NO_THROW(Case::parse("gdr_grad(layout=single[200],cp=50+120)"));
  EXPECT_NO_THROW(Case::parse("gdr_grad(layout=packed[8,0,8],cp=3+5+12)"));
  for (const char* bad :
       {"cp=120+50", "cp=50+50", "cp=50+", "cp=+50", "cp=050", "cp=5x", "cp=50+200"})
    EXPECT_THROW(Case::parse(std::string("gdr_grad(layout=single[200],") + bad + ")"),
                 cases::CaseIdError)
        << bad;
  try {
    Case::parse("gdr_grad(layout=packed[8,8],cp=3+8)");
    ADD_FAILURE() << "a cut between two sequences";
  } catch (const cases::CaseIdError& e) {
    EXPECT_NE(std::string(e.what()).find("the cut at token 8 cuts no sequence"), std::string::npos)
        << e.what();
  }
}

// More ranks: one sequence over three (the middle rank holds a middle piece only: it starts from
// the state at its cut and hands its dh0 back), and six ranks with two cuts in one sequence.
TEST(GdrGradContextParallel, MoreRanksSplitAndCallFromTheLast) {
  const Case c = Case::parse("gdr_grad(layout=single[200],dht=rand,cp=50+120,seed=3)");
  const gdr_grad::CpSplit s = gdr_grad::cp_split(gdr_grad::decode(c)).value();
  ASSERT_EQ(s.ranks.size(), 3u);
  for (size_t r = 0; r < 3; ++r) ASSERT_EQ(s.ranks[r].size(), 1u);
  EXPECT_EQ(s.ranks[1][0].offset, 50);
  EXPECT_EQ(s.ranks[1][0].length, 70);
  const std::vector<Case> ranks = gdr_grad::rank_cases(c);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[1].get("layout"), "single[70]");
  EXPECT_EQ(ranks[1].get("dht"), "rand");
  const Operation& op = operation_for(c);
  EXPECT_EQ(op.call_mode(c).count, 3);
  const auto calls = op.driven_calls(c);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].first, "rank 2");
  EXPECT_EQ(calls[2].first, "rank 0");
  const std::string why = op.explain_failure(c, 0, 60);
  EXPECT_NE(why.find("seq 0 token 60 came from rank 1 of 3"), std::string::npos) << why;
  EXPECT_NE(why.find("[50, 120)"), std::string::npos) << why;
  const Case six =
      Case::parse("gdr_grad(layout=packed[1*30,64,127,129,0,257],cp=60+150+300+400+500)");
  const gdr_grad::CpSplit s6 = gdr_grad::cp_split(gdr_grad::decode(six)).value();
  ASSERT_EQ(s6.ranks.size(), 6u);
  ASSERT_EQ(s6.ranks[4].size(), 1u);  // the middle of the 257-token sequence only
  EXPECT_EQ(s6.ranks[4][0].seq, 34);  // after 30 one-token sequences, 64, 127, 129 and 0
  EXPECT_EQ(s6.ranks[4][0].offset, 50);
  EXPECT_EQ(s6.ranks[4][0].length, 100);
  int64_t tokens = 0;
  for (const auto& pieces : s6.ranks)
    for (const auto& x : pieces) tokens += x.length;
  EXPECT_EQ(tokens, 607);
}

double rel_rms(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    num += (x[i] - ref[i]) * (x[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / den);
}

// The two ranks through the FP64 oracle give the unsplit oracle's gradients (up to the state at
// the cut rounded to fp32); without dh0 passed back, or from a zero state at the cut, they do
// not: both halves of the hand-over matter.
TEST(GdrGradContextParallel, TwoRanksOfTheOracleAreTheOracle) {
  for (const char* id :
       {"gdr_grad(layout=packed[63,0,65],K=16,V=16,gate=zero,dht=rand,cp=100)",
        "gdr_grad(layout=packed[63,0,65],K=16,V=16,state=none,dht=none,cp=60)",
        "gdr_grad(layout=packed[0,1,2,15,16,0],K=8,V=8,gate=zero,state=mixed,cp=10)",
        "gdr_grad(layout=single[200],K=16,V=16,gate=weak,dht=rand,cp=50+120)",
        "gdr_grad(layout=packed[63,0,65],K=16,V=16,gate=zero,state=none,cp=30+70+100)"}) {
    const Case c = Case::parse(id);
    const TensorMap in = cases::generate_inputs(c, {});
    const Operation& op = operation_for(c);
    const Values whole = op.oracle(c, in);
    // The FP64 oracle as each rank's backend; on rank `rank`, input `zeroed` set to zero first.
    auto oracle = [&](int broken = -1, const char* zeroed = "") -> gdr_grad::RankRun {
      return
          [&op, broken, zeroed](int rank, const Case& rc, const TensorMap& t) -> StatusOr<Values> {
            if (rank != broken) return op.oracle(rc, t);
            TensorMap changed = t;
            Tensor& x = changed.at(zeroed);
            for (int64_t e = 0; e < x.numel(); ++e) x.set(e, 0.0);
            return op.oracle(rc, changed);
          };
    };
    const Values split = gdr_grad::run_context_parallel(c, in, oracle()).take();
    SCOPED_TRACE(id);
    ASSERT_EQ(split.size(), whole.size()) << id;
    for (const auto& [name, ref] : whole) {
      ASSERT_EQ(split.at(name).size(), ref.size()) << id << " " << name;
      EXPECT_LT(rel_rms(split.at(name), ref), 1e-6) << id << " " << name;
    }
    // Rank 0 without the dh0 of rank 1 (zero instead): dk wrong before the cut (dq is not: it
    // depends on the forward states only). Rank 1 from a zero state at the cut: dk wrong after.
    for (const auto& [rank, zeroed] : {std::pair{0, "dht"}, std::pair{1, "initial_state"}}) {
      const Values wrong = gdr_grad::run_context_parallel(c, in, oracle(rank, zeroed)).take();
      EXPECT_GT(rel_rms(wrong.at("dk"), whole.at("dk")), 1e-3) << id << " " << zeroed;
    }
  }
}

// A cp case's baselines run split too, each in its own arithmetic, near the unsplit oracle. (The
// recurrent baselines are nearly split-invariant: only the state at the cut, rounded to fp32,
// differs from their own.)
TEST(GdrGradContextParallel, BaselinesAreSplitLikeTheCase) {
  const Case c = Case::parse(
      "gdr_grad(layout=packed[63,0,65],K=16,V=16,dtype=bf16,gate=zero,dht=rand,cp=100)");
  const Case plain =
      Case::parse("gdr_grad(layout=packed[63,0,65],K=16,V=16,dtype=bf16,gate=zero,dht=rand)");
  const TensorMap in = cases::generate_inputs(c, {});
  const Operation& op = operation_for(c);
  const std::vector<Baseline> split = op.baselines(c, in, MatmulPrecision::kDefault);
  const std::vector<Baseline> whole = op.baselines(plain, in, MatmulPrecision::kDefault);
  const Values oracle = op.oracle(c, in);
  ASSERT_EQ(split.size(), whole.size());
  for (size_t i = 0; i < split.size(); ++i) {
    EXPECT_NE(split[i].name.find("split like the case"), std::string::npos) << split[i].name;
    for (const auto& [name, ref] : oracle) {
      const double rel = rel_rms(split[i].values.at(name), ref);
      EXPECT_GT(rel, 0.0) << split[i].name << " " << name;
      EXPECT_LT(rel, 2e-2) << split[i].name << " " << name;
    }
  }
}

}  // namespace
}  // namespace deltacheck::ops
