// The gdr operation: outputs o [B,T,HV,V] (dtype of v) and final_state [N,HV,K,V] (fp32), the FP64
// oracle from reference/gated_delta_rule, and the fp32 plain recurrence as tolerance baseline.
#include <stdexcept>

#include "harness/gdr_problem.h"
#include "harness/operation.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::harness {
namespace {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;

class GdrOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const GdrDims d = gdr_dims(c);
    std::vector<OutputSpec> o{{"o", d.dtype, {d.B, d.T, d.HV, d.V}}};
    if (d.final_state) o.push_back({"final_state", DType::kF32, {d.N, d.HV, d.K, d.V}});
    return o;
  }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    const GdrDims d = gdr_dims(c);
    const std::vector<double> q = in.at("q").to_double(), k = in.at("k").to_double(),
                              v = in.at("v").to_double(), g = in.at("g").to_double(),
                              beta = in.at("beta").to_double();
    std::vector<double> s0;
    reference::GatedDeltaRuleArgs a;
    a.batch = d.B;
    a.seq_len = d.T;
    a.num_heads = d.H;
    a.num_value_heads = d.HV;
    a.key_dim = d.K;
    a.value_dim = d.V;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.g = g.data();
    a.beta = beta.data();
    if (const Tensor* cu = in.find("cu_seqlens"))
      a.cu_seqlens.assign(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
    if (const Tensor* t = in.find("initial_state")) {
      s0 = t->to_double();
      a.initial_state = s0.data();
    }
    a.use_qk_l2norm = d.l2;
    reference::GatedDeltaRuleResult r = reference::gated_delta_rule(a);
    Values out;
    out["o"] = std::move(r.output);
    if (d.final_state) out["final_state"] = std::move(r.final_state);
    return out;
  }

  Values baseline(const cases::Case& c, const TensorMap& in) const override {
    TensorMap out;
    for (const OutputSpec& s : outputs(c)) out.add(Tensor(s.name, s.dtype, s.shape));
    kernels::cpu::GatedDeltaRuleParams p = gdr_params(c, in, out);
    Status st = kernels::cpu::recurrent_gated_delta_rule(p);
    if (!st.ok()) throw std::runtime_error("baseline recurrence failed: " + st.message());
    Values v;
    for (const Tensor& t : out.all()) v[t.name()] = t.to_double();
    return v;
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const GdrDims d = gdr_dims(c);
    std::vector<SeqSlice> s;
    if (output == "o") {
      const int64_t per = d.HV * d.V;
      const auto cu = d.layout.kind == cases::Layout::Kind::kBatch ? std::vector<int64_t>{}
                                                                   : d.layout.cu_seqlens();
      for (int64_t i = 0; i < d.N; ++i) {
        const int64_t b = cu.empty() ? i * d.T : cu[i], e = cu.empty() ? (i + 1) * d.T : cu[i + 1];
        s.push_back({i, b * per, e * per, per});
      }
    } else {
      const int64_t per = d.HV * d.K * d.V;
      for (int64_t i = 0; i < d.N; ++i) s.push_back({i, i * per, (i + 1) * per, 0});
    }
    return s;
  }

  std::vector<int64_t> sequence_lengths(const cases::Case& c) const override {
    return gdr_dims(c).layout.lengths;
  }

  TensorMajor major(const std::string& t) const override {
    if (t == "initial_state" || t == "final_state") return TensorMajor::kSequence;
    if (t == "q" || t == "k" || t == "v" || t == "g" || t == "beta" || t == "o")
      return TensorMajor::kToken;
    return TensorMajor::kNone;
  }

  std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const override {
    if (c.get("cache") == "none") return {};
    return {{"final_state", "initial_state"}};
  }
};

}  // namespace

const Operation& gdr_operation() {
  static const GdrOperation op;
  return op;
}

}  // namespace deltacheck::harness
