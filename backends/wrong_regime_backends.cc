// Deliberately wrong token recurrences whose bug shows only in the input regimes real models live
// in (ops/gdr/regimes.h, docs/cases.md#regimes); on random inputs they pass:
//   wrong:rounded-stk       S^T k rounded to the activation dtype (bf16 / fp16; fp32 unchanged)
//                           before v - S^T k: the residual of a converged memory is erased
//                           (attention-gym#465: S^T k = 4098, v = 4096, the -2 became 0)
//   wrong:l2norm-max-eps    q and k normalized as x / max(||x||, 1e-6) instead of
//                           x * rsqrt(sum x^2 + 1e-6): the two part for q/k norms below ~1e-2
//                           (unslothai/llama.cpp#156); on the layer too (right:recurrent's
//                           layer with that norm: backends/right/panel.h)
// Each is the plain fp32 recurrence of docs/semantics.md with that one change, one sequence and
// value head at a time, in cache modes none, prefill and decode (chunked and dynamic cases come
// as such calls from the harness). And one chunked form:
//   wrong:ut-solve-lowp     right:chunked-lowp (tensor-core operands) with the UT matrix's forward
//                           substitution carried in the activation dtype: each entry of
//                           A = strictly_lower(diag(beta) K K^T (.) decay) and each running sum
//                           of T = (I + A)^-1 rounded as it is computed, where FLA solves in fp32
//                           and rounds T once; correlated keys (regime=corrk) make T a
//                           cancellation (vllm PR #53864's bf16 inversion divergence). gdr and
//                           layer, every cache mode right:* runs; fp32 cases unchanged.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/backends.h"
#include "backends/right/panel.h"
#include "core/half.h"
#include "ops/gdr/params.h"

namespace deltacheck::backends {
namespace {

enum class Bug { kRoundedStk, kL2NormMaxEps };

// x normalized in place: FLA's x * rsqrt(sum x^2 + 1e-6), or the bug's x / max(||x||, 1e-6).
void l2_normalize(float* x, int64_t n, bool max_eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = max_eps ? 1.0f / std::max(std::sqrt(ss), 1e-6f) : 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// x as the activation dtype would store it (round to nearest even).
float round_to(DType t, float x) {
  if (t == DType::kBF16) return bf16_to_float(float_to_bf16(x));
  if (t == DType::kF16) return fp16_to_float(float_to_fp16(x));
  return x;
}

class WrongRegimeBackend : public Backend {
 public:
  WrongRegimeBackend(std::string name, std::string description, Bug bug)
      : name_(std::move(name)), description_(std::move(description)), bug_(bug) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_wrong() const override { return true; }
  // A recurrent kernel with an fp32 state and fp32 operands, declared as its correct
  // counterpart would declare it: judged without the activation-dtype-operands baseline
  // (docs/tolerance.md, "Precision profiles"), where its rounded S^T k is 3500x off.
  PrecisionProfile precision_profile() const override {
    PrecisionProfile p;
    p.operands_fp32 = bug_ == Bug::kRoundedStk;
    return p;
  }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "layer" && bug_ == Bug::kL2NormMaxEps) return Support::Yes();
    return gdr_calls_support(name(), c);
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override;

 private:
  std::string name_, description_;
  Bug bug_;
};

Status WrongRegimeBackend::run(const cases::Case& c, const cases::TensorMap& in,
                               cases::TensorMap& out) {
  if (c.op() == "layer")  // the layer around the bug: the panel's, with its recurrence
    return right::run_layer(right::Formulation::kRecurrentL2MaxEps, c, in, out);
  const ops::gdr::Params d = ops::gdr::decode(c);
  const int64_t K = d.K, V = d.V, H = d.H, HV = d.HV, group = HV / H, per = K * V;
  std::vector<int64_t> offs;
  if (const cases::Tensor* cu = in.find("cu_seqlens"))
    for (int64_t i = 0; i < cu->numel(); ++i) offs.push_back(static_cast<int64_t>(cu->get(i)));
  else
    for (int64_t b = 0; b <= d.B; ++b) offs.push_back(b * d.T);
  const cases::Tensor &q = in.at("q"), &k = in.at("k"), &v = in.at("v"), &g = in.at("g"),
                      &beta = in.at("beta");
  const cases::Tensor* initial = in.find("initial_state");
  cases::Tensor& o = out.at("o");
  cases::Tensor* final_state = out.find("final_state");
  const bool max_eps = bug_ == Bug::kL2NormMaxEps;
  const DType stk = bug_ == Bug::kRoundedStk ? d.dtype : DType::kF32;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
  std::vector<float> S(static_cast<size_t>(per)), qt(static_cast<size_t>(K)),
      kt(static_cast<size_t>(K)), u(static_cast<size_t>(V));
  for (size_t s = 0; s + 1 < offs.size(); ++s)
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t state_at = (static_cast<int64_t>(s) * HV + h) * per;
      for (int64_t i = 0; i < per; ++i)
        S[i] = initial ? static_cast<float>(initial->get(state_at + i)) : 0.0f;
      for (int64_t t = offs[s]; t < offs[s + 1]; ++t) {
        for (int64_t i = 0; i < K; ++i) {
          qt[i] = static_cast<float>(q.get((t * H + h / group) * K + i));
          kt[i] = static_cast<float>(k.get((t * H + h / group) * K + i));
        }
        if (d.l2) l2_normalize(qt.data(), K, max_eps), l2_normalize(kt.data(), K, max_eps);
        const float decay = std::exp(static_cast<float>(g.get(t * HV + h)));
        const float b = static_cast<float>(beta.get(t * HV + h));
        for (int64_t i = 0; i < per; ++i) S[i] *= decay;
        for (int64_t j = 0; j < V; ++j) u[j] = 0.0f;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) u[j] += kt[i] * S[i * V + j];
        for (int64_t j = 0; j < V; ++j)
          u[j] = b * (static_cast<float>(v.get((t * HV + h) * V + j)) - round_to(stk, u[j]));
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) S[i * V + j] += kt[i] * u[j];
        for (int64_t j = 0; j < V; ++j) {
          float acc = 0.0f;
          for (int64_t i = 0; i < K; ++i) acc += scale * qt[i] * S[i * V + j];
          o.set((t * HV + h) * V + j, acc);
        }
      }
      if (final_state)
        for (int64_t i = 0; i < per; ++i) final_state->set(state_at + i, S[i]);
    }
  return Status::Ok();
}

class UtSolveLowp : public Backend {
 public:
  std::string name() const override { return "wrong:ut-solve-lowp"; }
  std::string description() const override {
    return "deliberately wrong: tensor-core chunked form with the UT forward substitution in the "
           "activation dtype (vllm PR #53864)";
  }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" || c.op() == "layer") return Support::Yes();
    return Support::No("wrong:ut-solve-lowp implements gdr and layer only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (c.op() == "layer")
      return right::run_layer(right::Formulation::kChunkedLowpSolve, c, in, out);
    return right::run_gdr(right::Formulation::kChunkedLowpSolve, c, in, out);
  }
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_regime_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<WrongRegimeBackend>(
      "wrong:rounded-stk",
      "deliberately wrong: S^T k rounded to the activation dtype before v - S^T k "
      "(attention-gym#465)",
      Bug::kRoundedStk));
  v.push_back(std::make_unique<WrongRegimeBackend>(
      "wrong:l2norm-max-eps",
      "deliberately wrong: q/k normalized as x / max(||x||, 1e-6) instead of "
      "x * rsqrt(sum x^2 + 1e-6) (unslothai/llama.cpp#156)",
      Bug::kL2NormMaxEps));
  v.push_back(std::make_unique<UtSolveLowp>());
  return v;
}

}  // namespace deltacheck::backends
