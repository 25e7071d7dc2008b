// Every comparison can fail: the deliberately wrong backends get the verdicts they deserve, broken
// outputs (unwritten, out of bounds, NaN, thrown) never pass, and the CPU kernel passes the gate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "backends/registry.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/gdr/problem.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

// The single-call prefill gdr cases of a suite (other cache modes: test_cache_modes.cc).
std::vector<Case> gdr_prefill_cases(const std::string& suite) {
  std::vector<Case> out;
  for (const Case& c : cases::suite(suite))
    if (c.op() == "gdr" && (c.get("cache") == "prefill" || c.get("cache") == "none"))
      out.push_back(c);
  return out;
}

std::vector<Case> smoke_and_gate() {
  std::vector<Case> all = gdr_prefill_cases("smoke");
  for (const Case& c : gdr_prefill_cases("gate")) all.push_back(c);
  return all;
}

int nonempty_sequences(const Case& c) {
  int n = 0;
  for (int64_t l : cases::Layout::parse(c.get("layout")).lengths) n += l > 0;
  return n;
}

// Exact FP64 semantics of the "state from the wrong place" bugs: sequence i starts from
// initial_for(i) instead of its own state. Judging these exact outputs tells whether a bug is
// visible at all above the tolerance on a case (e.g. a carried state that an underflowing decay
// wipes out before it can be seen is provably invisible).
Verdict exact_wrong_verdict(const PreparedCase& pc, const std::string& bug) {
  const ops::gdr::Params d = ops::gdr::decode(pc.c);
  const auto cu = d.layout.cu_seqlens();
  const int64_t per = d.HV * d.K * d.V;
  const std::vector<double> q = pc.inputs.at("q").to_double(), k = pc.inputs.at("k").to_double(),
                            v = pc.inputs.at("v").to_double(), g = pc.inputs.at("g").to_double(),
                            beta = pc.inputs.at("beta").to_double();
  std::vector<double> s0(static_cast<size_t>(d.N * per), 0.0), carried(per, 0.0);
  if (const cases::Tensor* t = pc.inputs.find("initial_state")) s0 = t->to_double();
  cases::TensorMap out = allocate_outputs(pc.outputs);
  for (int64_t i = 0; i < d.N; ++i) {
    const int64_t b = cu[i], len = cu[i + 1] - cu[i];
    reference::GatedDeltaRuleArgs a;
    a.seq_len = len;
    a.num_heads = d.H;
    a.num_value_heads = d.HV;
    a.key_dim = d.K;
    a.value_dim = d.V;
    a.q = q.data() + b * d.H * d.K;
    a.k = k.data() + b * d.H * d.K;
    a.v = v.data() + b * d.HV * d.V;
    a.g = g.data() + b * d.HV;
    a.beta = beta.data() + b * d.HV;
    a.use_qk_l2norm = d.l2;
    const bool own = i == 0 || (bug == "row-chunk-grid" && b % 64 == 0);
    std::vector<double> zero(per, 0.0);
    a.initial_state =
        own ? s0.data() + i * per : (bug == "drop-initial-state" ? zero.data() : carried.data());
    const auto r = reference::gated_delta_rule(a);
    for (int64_t j = 0; j < len * d.HV * d.V; ++j) out.at("o").set(b * d.HV * d.V + j, r.output[j]);
    if (cases::Tensor* fs = out.find("final_state"))
      for (int64_t j = 0; j < per; ++j) fs->set(i * per + j, r.final_state[j]);
    carried = r.final_state;
  }
  return judge(pc, out, "exact:" + bug).verdict;
}

class WrongBackendVerdicts : public ::testing::TestWithParam<std::string> {};

// On packed cases with two or more non-empty sequences the bug is a leak, unless its exact FP64
// effect is itself below tolerance (named below); on everything else it passes.
TEST_P(WrongBackendVerdicts, LeakExactlyWhereTheBugIsVisible) {
  const std::string bug = GetParam();
  auto backend = make_backend("wrong:" + bug);
  int leaks = 0, invisible = 0, checked = 0;
  std::map<std::string, int> invisible_by_gate;
  for (const Case& c : smoke_and_gate()) {
    const cases::Layout L = cases::Layout::parse(c.get("layout"));
    const PreparedCase pc = prepare(c);
    const CaseResult r = run_case(pc, *backend);
    ++checked;
    // States flow through empty sequences too, so with a state in or out two sequences suffice.
    const bool keeps_state = c.get("cache") != "none";
    const bool can_leak = L.has_cu_seqlens() && L.num_seqs() >= 2 &&
                          (keeps_state || nonempty_sequences(c) >= 2) &&
                          !(bug == "drop-initial-state" && !keeps_state);
    if (!can_leak && !(bug == "drop-initial-state" && !L.has_cu_seqlens() && L.num_seqs() > 1)) {
      EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
      continue;
    }
    const Verdict exact = exact_wrong_verdict(pc, bug);
    if (exact == Verdict::kPass) {
      // Provably below tolerance: the exact wrong semantics is indistinguishable on this case.
      EXPECT_NE(r.verdict, Verdict::kFail) << c.id();
      ++invisible;
      ++invisible_by_gate[c.get("gate") + "/" + c.get("state")];
      continue;
    }
    EXPECT_EQ(r.verdict, Verdict::kLeak) << c.id() << ": " << r.message;
    EXPECT_GT(r.leak_seq, 0) << c.id();
    EXPECT_FALSE(r.message.empty());
    leaks += r.verdict == Verdict::kLeak;
  }
  // Invisible leaks are the exception: strong or underflowing decay at the boundary wipes the
  // carried state before it reaches an output, or the state it replaces was zero anyway.
  for (const auto& [why, n] : invisible_by_gate)
    std::printf("  %s: %d cases where the exact bug is below tolerance (gate/state %s)\n",
                bug.c_str(), n, why.c_str());
  EXPECT_GT(leaks, 40);
  EXPECT_LT(invisible * 5, leaks) << "too many cases cannot see the " << bug << " bug";
  EXPECT_GT(checked, 150);
}

INSTANTIATE_TEST_SUITE_P(Bugs, WrongBackendVerdicts,
                         ::testing::Values("ignore-cu-seqlens", "drop-initial-state",
                                           "row-chunk-grid"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(WrongBackends, ReadoutBeforeUpdateFailsEverywhere) {
  auto backend = make_backend("wrong:readout-before-update");
  for (const Case& c : gdr_prefill_cases("smoke")) {
    const CaseResult r = run_case(prepare(c), *backend);
    // A converged memory's update is 2^-6 of v (ops/gdr/regimes.h): read out before it, o is
    // ~1e-3 off, caught in fp32 and fp16 but within bf16's tolerance (docs/tolerance.md).
    const bool hidden =
        c.has("regime") && c.get("regime") == "converged" && c.get("dtype") == "bf16";
    EXPECT_EQ(r.verdict, hidden ? Verdict::kPass : Verdict::kFail) << c.id() << ": " << r.message;
  }
}

TEST(WrongBackends, IgnoreStateFailsWhereTheFirstSequenceHasAState) {
  auto backend = make_backend("wrong:ignore-state");
  for (const Case& c : gdr_prefill_cases("smoke")) {
    const CaseResult r = run_case(prepare(c), *backend);
    if (c.get("state") == "rand" && c.get("cache") != "none") {
      EXPECT_EQ(r.verdict, Verdict::kFail) << c.id() << ": " << r.message;
    } else if (c.get("state") == "none" || c.get("cache") == "none") {
      EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    }
  }
}

TEST(CpuBackend, PassesTheGateSuite) {
  auto backend = make_backend("cpu");
  for (const Case& c : cases::suite("gate")) {
    const CaseResult r = run_case(prepare(c), *backend);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    EXPECT_LT(r.margin, 1.0);
  }
}

// The full suite's cases beyond the gate (long sequences, many sequences, the largest shapes).
// One of them found the per-sequence ceiling of tol-v1 failing a right kernel: a bf16 layer
// case of 200 one-token sequences, where the straightforward implementation itself is 2.3e-2
// off on one token (tol-v2 bounds the tensor, not the sequence, by the ceiling).
TEST(CpuBackend, PassesTheFullSuitesOwnCases) {
  auto backend = make_backend("cpu");
  std::set<std::string> gate;
  for (const Case& c : cases::suite("gate")) gate.insert(c.id());
  int extra = 0;
  for (const Case& c : cases::suite("full")) {
    if (gate.count(c.id())) continue;
    ++extra;
    const CaseResult r = run_case(prepare(c), *backend);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
  }
  EXPECT_GE(extra, 20);
  const CaseResult r = run_case(
      prepare(Case::parse("layer(layout=packed[1*200],H=2,HV=4,K=32,V=32,W=4,bias=1,dtype=bf16,"
                          "state=rand,cache=dynamic,calls=5,seed=525)")),
      *backend);
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.message;
}

// A backend whose behaviour is given by a function, for integrity checks.
class ScriptedBackend : public Backend {
 public:
  using Fn = std::function<Status(const Case&, const cases::TensorMap&, cases::TensorMap&)>;
  explicit ScriptedBackend(Fn fn) : fn_(std::move(fn)) {}
  std::string name() const override { return "scripted"; }
  std::string description() const override { return "test"; }
  Support supports(const Case&) const override { return Support::Yes(); }
  Status run(const Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return fn_(c, in, out);
  }

 private:
  Fn fn_;
};

Status correct(const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  return make_backend("cpu")->run(c, in, out);
}

Verdict verdict_of(ScriptedBackend::Fn fn, std::string* message = nullptr) {
  const PreparedCase pc = prepare(Case::parse("gdr(layout=packed[20,0,30],dtype=bf16,seed=5)"));
  ScriptedBackend b(std::move(fn));
  const CaseResult r = run_case(pc, b);
  if (message) *message = r.message;
  return r.verdict;
}

TEST(Integrity, BrokenOutputsNeverPass) {
  std::string msg;
  EXPECT_EQ(verdict_of(correct), Verdict::kPass);
  EXPECT_EQ(verdict_of([](auto&, auto&, auto&) { return Status::Ok(); }, &msg), Verdict::kError);
  EXPECT_NE(msg.find("unwritten"), std::string::npos) << msg;
  EXPECT_EQ(verdict_of(
                [](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
                  Status s = correct(c, in, out);
                  static_cast<char*>(out.at("o").data())[out.at("o").nbytes()] = 1;  // 1 past
                  return s;
                },
                &msg),
            Verdict::kError);
  EXPECT_NE(msg.find("outside"), std::string::npos) << msg;
  EXPECT_EQ(verdict_of(
                [](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
                  Status s = correct(c, in, out);
                  static_cast<char*>(out.at("final_state").data())[-1] = 1;  // 1 before
                  return s;
                },
                &msg),
            Verdict::kError);
  EXPECT_EQ(verdict_of(
                [](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
                  Status s = correct(c, in, out);
                  out.at("o").set(7, std::nan(""));
                  return s;
                },
                &msg),
            Verdict::kFail);
  EXPECT_NE(msg.find("non-finite"), std::string::npos) << msg;
  EXPECT_EQ(
      verdict_of([](auto&, auto&, auto&) -> Status { throw std::runtime_error("boom"); }, &msg),
      Verdict::kError);
  EXPECT_NE(msg.find("boom"), std::string::npos);
  EXPECT_EQ(verdict_of([](auto&, auto&, auto&) { return Status::Internal("bad launch"); }, &msg),
            Verdict::kError);
  EXPECT_EQ(verdict_of([](auto&, auto&, auto&) { return Status::Unsupported("no CUDA device"); }),
            Verdict::kUnsupported);
  // The reference's answer for another case (a different seed) is a failure.
  EXPECT_EQ(verdict_of([](const Case& c, const cases::TensorMap&, cases::TensorMap& out) {
              const Case other = c.with("seed", "6");
              const PreparedCase pc = prepare(other);
              for (cases::Tensor& t : out.all()) {
                const auto& e = pc.expected.at(t.name());
                for (int64_t i = 0; i < t.numel(); ++i) t.set(i, e[i]);
              }
              return Status::Ok();
            }),
            Verdict::kFail);
  // A tiny error in the second sequence only is a leak naming it. (Only inside a pack: the same
  // sequence run alone is right, so this is a real leak.) The same in the first sequence is a
  // leak into it (right alone, wrong in the pack); wrong alone too, it is a fail.
  auto perturb = [](int64_t token) {
    return [token](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
      Status s = correct(c, in, out);
      if (in.has("cu_seqlens"))
        for (int64_t j = 0; j < 8; ++j) out.at("o").set(token * 2 * 64 + j, 0.5);
      return s;
    };
  };
  EXPECT_EQ(verdict_of(perturb(25), &msg), Verdict::kLeak);
  EXPECT_NE(msg.find("seq 2 from token 5"), std::string::npos) << msg;
  EXPECT_EQ(verdict_of(perturb(3), &msg), Verdict::kLeak);
  EXPECT_NE(msg.find("a later sequence leaks into it"), std::string::npos) << msg;
  EXPECT_EQ(verdict_of(
                [](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
                  Status s = correct(c, in, out);
                  for (int64_t j = 0; j < 8; ++j) out.at("o").set(3 * 2 * 64 + j, 0.5);
                  return s;
                },
                &msg),
            Verdict::kFail);
  EXPECT_NE(msg.find("probes are off"), std::string::npos) << msg;
}

TEST(Integrity, DegenerateExpectationIsAnError) {
  const PreparedCase pc = prepare(Case::parse("gdr(layout=single[8],beta=zero,state=none)"));
  auto cpu = make_backend("cpu");
  const CaseResult r = run_case(pc, *cpu);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.message.find("degenerate"), std::string::npos);
}

}  // namespace
}  // namespace deltacheck::backends

namespace deltacheck::backends {
namespace {

// A kernel whose fp32 matmuls run in TF32, modelled by the CPU kernel on q, k and v rounded to
// 10 mantissa bits (round half away from zero on the bits: not the baseline's rounding code).
class Tf32Like : public Backend {
 public:
  explicit Tf32Like(MatmulPrecision declared) : declared_(declared) {}
  std::string name() const override { return "tf32-like"; }
  std::string description() const override { return "test"; }
  MatmulPrecision matmul_precision() const override { return declared_; }
  Support supports(const Case& c) const override { return cpu_->supports(c); }
  Status run(const Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    cases::TensorMap rounded = in;
    for (const char* name : {"q", "k", "v"}) {
      cases::Tensor& t = rounded.at(name);
      for (int64_t i = 0; i < t.numel(); ++i) {
        uint32_t bits;
        const float x = static_cast<float>(t.get(i));
        std::memcpy(&bits, &x, 4);
        bits = (bits + (1u << 12)) & ~((1u << 13) - 1);
        float y;
        std::memcpy(&y, &bits, 4);
        t.set(i, y);
      }
    }
    return cpu_->run(c, rounded, out);
  }

 private:
  MatmulPrecision declared_;
  std::unique_ptr<Backend> cpu_ = make_backend("cpu");
};

TEST(MatmulPrecision, TF32IsJudgedAgainstItsBaselineOnlyWhenDeclared) {
  const PreparedCase pc = prepare(Case::parse("gdr(layout=packed[63,0,65],dtype=fp32,seed=9)"));
  Tf32Like undeclared(MatmulPrecision::kDefault), declared(MatmulPrecision::kTF32);
  const CaseResult u = run_case(pc, undeclared);
  EXPECT_EQ(u.verdict, Verdict::kFail);
  EXPECT_EQ(u.precision, "fp32");
  EXPECT_NE(u.message.find("TF32 size"), std::string::npos) << u.message;
  const CaseResult d = run_case(pc, declared);
  EXPECT_EQ(d.verdict, Verdict::kPass) << d.message;
  EXPECT_EQ(d.precision, "tf32");
  bool named = false;
  for (const TensorReport& t : d.tensors)
    named = named || t.baseline_name.find("tf32") != std::string::npos;
  EXPECT_TRUE(named) << "the TF32 baseline sets the threshold";
  // bf16 activations are not fp32 matmuls: a TF32 declaration changes nothing there.
  const PreparedCase bf = prepare(Case::parse("gdr(layout=packed[63,0,65],dtype=bf16,seed=9)"));
  EXPECT_EQ(run_case(bf, declared).verdict, Verdict::kPass);
  // A small fp32 slip far below TF32's size gets no TF32 hint.
  ScriptedBackend slip([](const Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
    Status s = make_backend("cpu")->run(c, in, out);
    cases::Tensor& o = out.at("o");
    for (int64_t i = 0; i < o.numel(); i += 7) o.set(i, o.get(i) * (1 + 3e-5));
    return s;
  });
  const CaseResult sr = run_case(pc, slip);
  EXPECT_EQ(sr.verdict, Verdict::kFail);
  EXPECT_EQ(sr.message.find("TF32"), std::string::npos) << sr.message;
}

}  // namespace
}  // namespace deltacheck::backends
