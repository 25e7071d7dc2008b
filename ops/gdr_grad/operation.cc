// The gdr_grad operation. Outputs dq, dk [B,T,H,K], dv [B,T,HV,V], dbeta [B,T,HV] (dtype of the
// activations), dg [B,T,HV] (fp32, like g) and dh0 [N,HV,K,V] (fp32, with an initial state). The
// FP64 oracle is reference/gated_delta_rule_backward; the tolerance baselines are the same
// backward recurrence in the case's precision (fp32 compute, operands rounded to bf16 / fp16 /
// TF32 like the forward's tensor-core baseline), from the same reference source: nothing of
// kernels/. Tail tokens (past cu_seqlens[-1]) must come back exactly zero. A cp case is driven as
// two context-parallel calls; its baselines are split the same way (context_parallel.h).
#include "ops/operation.h"

#include <stdexcept>

#include "ops/decode.h"
#include "ops/gdr_grad/context_parallel.h"
#include "ops/gdr_grad/params.h"
#include "ops/grad_common.h"
#include "reference/gated_delta_rule_backward.h"

namespace deltacheck::ops::gdr_grad {
namespace {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;

// Elements per token of a token-major output.
int64_t per_token(const gdr::Params& d, const std::string& output) {
  if (output == "dq" || output == "dk") return d.H * d.K;
  if (output == "dv") return d.HV * d.V;
  return d.HV;  // dg, dbeta
}

class GdrGradOperation : public grad::BackwardOperation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const Params p = decode(c);
    const gdr::Params& d = p.rule;
    std::vector<OutputSpec> o{{"dq", d.dtype, {d.B, d.T, d.H, d.K}},
                              {"dk", d.dtype, {d.B, d.T, d.H, d.K}},
                              {"dv", d.dtype, {d.B, d.T, d.HV, d.V}},
                              {"dg", DType::kF32, {d.B, d.T, d.HV}, d.dtype},
                              {"dbeta", d.dtype, {d.B, d.T, d.HV}}};
    // Tokens past cu_seqlens[-1]: exactly zero (the oracle's values), checked bit for bit.
    if (p.tail > 0)
      grad::zero_tail(o, p.tokens(), d.T, [&](const std::string& n) { return per_token(d, n); });
    if (p.dh0()) o.push_back({"dh0", DType::kF32, {d.N, d.HV, d.K, d.V}, d.dtype});
    return o;
  }

  // A cp case's baselines are split as the backend is: each runs every rank in its own
  // arithmetic from the same states at the cuts and passes its own dh0 back.
  std::vector<Baseline> baselines(const cases::Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override {
    const Params p = decode(c);
    if (p.cp.empty()) return BackwardOperation::baselines(c, in, precision);
    std::vector<Baseline> out;
    for (const reference::Arithmetic& how : grad_baselines(p.rule.dtype, precision)) {
      StatusOr<Values> v = run_context_parallel(
          c, in, [this, &how](int, const cases::Case& rc, const TensorMap& t) -> StatusOr<Values> {
            return backward(rc, t, &how);
          });
      if (!v.ok()) throw std::invalid_argument(v.status().message());
      out.push_back({"backward " + reference::describe(how) + ", split like the case", v.take()});
    }
    return out;
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const gdr::Params d = decode(c).rule;
    std::vector<SeqSlice> s;
    for (int64_t i = 0; i < d.N; ++i)
      s.push_back(output == "dh0" ? grad::sequence_slice(i, d.HV * d.K * d.V)
                                  : grad::token_slice(d.layout, i, per_token(d, output)));
    return s;
  }

  TensorMajor major(const std::string& t) const override {
    if (t == "initial_state" || t == "dht" || t == "dh0") return TensorMajor::kSequence;
    if (t == "q" || t == "k" || t == "v" || t == "g" || t == "beta" || t == "do" || t == "dq" ||
        t == "dk" || t == "dv" || t == "dg" || t == "dbeta")
      return TensorMajor::kToken;
    return TensorMajor::kNone;
  }

  // Repacking keeps the tokens of sequences only (a padding tail is left out: BackwardOperation).
  // No split probe: splitting the backward needs the state gradient passed back from the second
  // call to the first, which is what cp cases do (their ranks' calls are not repacked further).
  bool repackable(const cases::Case& c) const override {
    return BackwardOperation::repackable(c) && decode(c).cp.empty();
  }
  // cp=S1+...: one call per rank, the last rank first (ops/gdr_grad/context_parallel.h).
  CallMode call_mode(const cases::Case& c) const override {
    const Params p = decode(c);
    if (p.cp.empty()) return {};
    return {CallMode::Kind::kDriven, static_cast<int>(p.cp.size()) + 1};
  }

  Status drive(const cases::Case& c, const TensorMap& in, TensorMap& outputs,
               const RunCall& run) const override {
    const CpSplit s = checked(cp_split(decode(c)));
    StatusOr<Values> v = run_context_parallel(
        c, in, [&](int rank, const cases::Case& rc, const TensorMap& t) -> StatusOr<Values> {
          const int last = static_cast<int>(s.ranks.size()) - 1;
          DrivenCall call{last - rank, rank_kind(rank), {}};
          const std::vector<Piece>& pieces = s.ranks[rank];
          for (size_t i = 0; i < pieces.size(); ++i)
            call.rows.push_back(
                {pieces[i].seq, static_cast<int64_t>(i), pieces[i].offset, pieces[i].length});
          StatusOr<TensorMap> out = run(call, rc, t);
          if (!out.ok()) return out.status();
          Values got;
          for (const Tensor& x : out.value().all()) got[x.name()] = x.to_double();
          return got;
        });
    if (!v.ok()) return v.status();
    for (Tensor& t : outputs.all()) {  // the backend's own values: exact in their dtype
      const std::vector<double>& x = v.value().at(t.name());
      for (int64_t e = 0; e < t.numel(); ++e) t.set(e, x[e]);
    }
    return Status::Ok();
  }

  std::vector<std::pair<std::string, cases::Case>> driven_calls(
      const cases::Case& c) const override {
    const std::vector<cases::Case> ranks = rank_cases(c);
    std::vector<std::pair<std::string, cases::Case>> calls;  // the last rank first
    for (int r = static_cast<int>(ranks.size()) - 1; r >= 0; --r)
      calls.emplace_back(rank_kind(r), ranks[r]);
    return calls;
  }

  std::string explain_failure(const cases::Case& c, int64_t seq, int64_t token) const override {
    return explain_rank(c, seq, token);
  }

 protected:
  Problem problem(const cases::Case& c) const override {
    const Params p = decode(c);
    return {p.rule.layout, p.rule.dtype, p.tail, "backward "};
  }
  Values backward(const cases::Case& c, const TensorMap& in,
                  const reference::Arithmetic* how) const override {
    const Params p = decode(c);
    std::vector<std::vector<double>> buffers;
    const reference::GatedDeltaRuleArgs a = gdr::reference_args(p.rule, in, buffers);
    const std::vector<double> dout = in.at("do").to_double();
    std::vector<double> dht;
    if (const Tensor* t = in.find("dht")) dht = t->to_double();
    const double* dfs = dht.empty() ? nullptr : dht.data();
    reference::GatedDeltaRuleGradients r =
        how ? reference::gated_delta_rule_backward(a, dout.data(), dfs, *how)
            : reference::gated_delta_rule_backward(a, dout.data(), dfs);
    Values v{{"dq", std::move(r.dq)},
             {"dk", std::move(r.dk)},
             {"dv", std::move(r.dv)},
             {"dg", std::move(r.dg)},
             {"dbeta", std::move(r.dbeta)}};
    if (p.dh0()) v["dh0"] = std::move(r.dh0);
    return v;
  }
};

}  // namespace

const Operation& operation() {
  static const GdrGradOperation op;
  return op;
}

}  // namespace deltacheck::ops::gdr_grad
