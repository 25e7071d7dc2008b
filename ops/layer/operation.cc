// The layer operation: outputs o [1,T,HV,V] (activation dtype), final_state [N,HV,K,V] and
// final_conv_state [N,D,W-1] (fp32). Oracle: reference::linear_attention_layer in FP64. Baseline:
// the same composition in the case's precision — FP64 reference pieces with the activations
// rounded to the dtype between steps, as a model keeps them, and each of the rule's fp32 baseline
// formulations (ops/precision.h, rule_baselines) for the rule.
#include "ops/operation.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/layer/params.h"
#include "ops/layer/serving.h"
#include "reference/causal_conv1d.h"
#include "reference/gated_rms_norm.h"
#include "reference/gates.h"
#include "reference/linear_attention_layer.h"

namespace deltacheck::ops::layer {
namespace {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;

std::vector<double> values(const TensorMap& in, const std::string& name) {
  const Tensor* t = in.find(name);
  return t ? t->to_double() : std::vector<double>{};
}

const double* ptr(const std::vector<double>& v) { return v.empty() ? nullptr : v.data(); }

std::vector<int64_t> cu_of(const TensorMap& in, const Params& d) {
  if (const Tensor* cu = in.find("cu_seqlens"))
    return std::vector<int64_t>(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
  return {0, d.T};
}

class LayerOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.serving()) return serving_outputs(d);
    // Four rounding stages (conv, gates, rule, norm) in the activation dtype: twice the ceiling.
    std::vector<OutputSpec> o{{"o", d.dtype, {1, d.T, d.HV, d.V}, std::nullopt, 2.0}};
    if (d.states()) {
      // States are fp32, but the recurrent one is computed from activations in the case's dtype.
      o.push_back({"final_state", DType::kF32, {d.N, d.HV, d.K, d.V}, d.dtype, 2.0});
      o.push_back({"final_conv_state", DType::kF32, {d.N, d.D, d.W - 1}});
    }
    return o;
  }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    if (decode(c).serving())
      return evaluate_serving(
          c, in, [this](const cases::Case& p, const TensorMap& m) { return oracle(p, m); });
    const Params d = decode(c);
    std::vector<std::vector<double>> buffers;
    auto res = reference::linear_attention_layer(reference_args(d, in, buffers));
    Values out{{"o", std::move(res.output)}};
    if (d.states()) {
      out["final_state"] = std::move(res.final_state);
      out["final_conv_state"] = std::move(res.final_conv_state);
    }
    return out;
  }

  std::vector<Baseline> baselines(const cases::Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override {
    return baselines_of(c, in, rule_baselines(decode(c).dtype, precision));
  }

  Baseline baseline(const cases::Case& c, const TensorMap& in, const PrecisionProfile& precision,
                    size_t i) const override {
    return baselines_of(c, in, {rule_baselines(decode(c).dtype, precision).at(i)}).at(0);
  }

  // The layer with the rule computed each way in `hows`; conv, gates and norm are the same in each.
  std::vector<Baseline> baselines_of(const cases::Case& c, const TensorMap& in,
                                     const std::vector<reference::Arithmetic>& hows) const {
    if (decode(c).serving()) {  // each formulation through the serving evaluation
      std::vector<Baseline> out;
      for (const reference::Arithmetic& how : hows) {
        Baseline b{reference::describe(how), {}};
        b.values = evaluate_serving(c, in, [&](const cases::Case& p, const TensorMap& m) {
          return baselines_of(p, m, {how}).at(0).values;
        });
        out.push_back(std::move(b));
      }
      return out;
    }
    const Params d = decode(c);
    const auto cu = cu_of(in, d);
    const auto qkv = values(in, "qkv"), z = values(in, "z"), a = values(in, "a"),
               b = values(in, "b"), cw = values(in, "conv_weight"), cb = values(in, "conv_bias"),
               alog = values(in, "A_log"), dtb = values(in, "dt_bias"),
               nw = values(in, "norm_weight"), s0 = values(in, "initial_state"),
               c0 = values(in, "initial_conv_state");
    reference::CausalConv1dArgs ca;
    ca.seq_len = d.T;
    ca.channels = d.D;
    ca.width = d.W;
    ca.x = qkv.data(), ca.weight = cw.data(), ca.bias = ptr(cb);
    ca.cu_seqlens = cu;
    ca.initial_state = ptr(c0);
    auto conv = reference::causal_conv1d(ca);
    round_to(conv.output, d.dtype);
    reference::GatesArgs ga;
    ga.num_tokens = d.T;
    ga.num_value_heads = d.HV;
    ga.a = a.data(), ga.b = b.data(), ga.A_log = alog.data(), ga.dt_bias = dtb.data();
    auto gates = reference::gates(ga);
    round_to(gates.g, DType::kF32);
    round_to(gates.beta, d.dtype);
    // Split the conv output into q, k, v (values of the case's dtype) for the rule.
    const int64_t hk = d.H * d.K, hvv = d.HV * d.V;
    std::vector<double> q(d.T * hk), k(d.T * hk), v(d.T * hvv);
    for (int64_t t = 0; t < d.T; ++t) {
      for (int64_t i = 0; i < hk; ++i) {
        q[t * hk + i] = conv.output[t * d.D + i];
        k[t * hk + i] = conv.output[t * d.D + hk + i];
      }
      for (int64_t i = 0; i < hvv; ++i) v[t * hvv + i] = conv.output[t * d.D + 2 * hk + i];
    }
    reference::GatedDeltaRuleArgs ra;
    ra.seq_len = d.T, ra.num_heads = d.H, ra.num_value_heads = d.HV, ra.key_dim = d.K;
    ra.value_dim = d.V;
    ra.q = q.data(), ra.k = k.data(), ra.v = v.data(), ra.g = gates.g.data();
    ra.beta = gates.beta.data();
    ra.cu_seqlens = cu;
    ra.initial_state = ptr(s0);
    ra.use_qk_l2norm = true;
    // One baseline per rule formulation; conv, gates and norm are the same in each.
    std::vector<Baseline> out;
    for (const reference::Arithmetic& how : hows) {
      reference::GatedDeltaRuleResult rule = reference::gated_delta_rule(ra, how);
      reference::GatedRmsNormArgs na;
      na.num_tokens = d.T;
      na.num_heads = d.HV;
      na.dim = d.V;
      na.x = rule.output.data(), na.z = z.data(), na.weight = nw.data();
      std::vector<double> y = reference::gated_rms_norm(na);
      round_to(y, d.dtype);
      Values vals{{"o", std::move(y)}};
      if (d.states()) {
        vals["final_state"] = std::move(rule.final_state);
        vals["final_conv_state"] = conv.final_state;
      }
      out.push_back({reference::describe(how), std::move(vals)});
    }
    return out;
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const Params d = decode(c);
    if (d.serving()) return serving_slices(d, output);
    const auto cu = d.layout.cu_seqlens();
    const int64_t per = output == "o"             ? d.HV * d.V
                        : output == "final_state" ? d.HV * d.K * d.V
                                                  : d.D * (d.W - 1);
    std::vector<SeqSlice> s;
    for (int64_t i = 0; i < d.N; ++i) {
      if (output == "o")
        s.push_back({i, cu[i] * per, cu[i + 1] * per, per});
      else
        s.push_back({i, i * per, (i + 1) * per, 0});
    }
    return s;
  }

  std::vector<int64_t> sequence_lengths(const cases::Case& c) const override {
    return decode(c).layout.lengths;
  }

  TensorMajor major(const std::string& t) const override {
    if (t == "qkv" || t == "z" || t == "a" || t == "b" || t == "o") return TensorMajor::kToken;
    if (t == "initial_state" || t == "final_state" || t == "initial_conv_state" ||
        t == "final_conv_state" || t == "state_slots" || t == "has_initial_state" ||
        t == "state_indices" || t == "num_accepted_tokens")
      return TensorMajor::kSequence;
    return TensorMajor::kNone;
  }

  // The serving modes' pools are shared by the sequences: they cannot be isolated by repacking,
  // and a wrong row is its own sequence's failure (docs/serving.md).
  bool repackable(const cases::Case& c) const override { return !decode(c).serving(); }
  bool presume_leaks(const cases::Case& c) const override { return !decode(c).serving(); }

  std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const override {
    if (!decode(c).states() || decode(c).serving()) return {};
    return {{"final_state", "initial_state"}, {"final_conv_state", "initial_conv_state"}};
  }

  CallMode call_mode(const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.cache == Cache::kChunked) return {CallMode::Kind::kChunked, d.calls};
    if (d.cache == Cache::kDynamic) return {CallMode::Kind::kDynamic, d.calls};
    return {};
  }
};

}  // namespace

reference::LinearAttentionLayerArgs reference_args(const Params& d, const TensorMap& in,
                                                   std::vector<std::vector<double>>& buffers) {
  auto get = [&](const char* name) -> const double* {
    const Tensor* t = in.find(name);
    if (!t) return nullptr;
    buffers.push_back(t->to_double());
    if (buffers.back().empty()) buffers.back().push_back(0.0);  // no tokens: read nowhere
    return buffers.back().data();
  };
  reference::LinearAttentionLayerArgs r;
  r.seq_len = in.at("qkv").shape()[1];
  r.num_heads = d.H;
  r.num_value_heads = d.HV;
  r.key_dim = d.K;
  r.value_dim = d.V;
  r.conv_width = d.W;
  r.qkv = get("qkv"), r.z = get("z"), r.a = get("a"), r.b = get("b");
  r.conv_weight = get("conv_weight"), r.conv_bias = get("conv_bias"), r.A_log = get("A_log");
  r.dt_bias = get("dt_bias"), r.norm_weight = get("norm_weight");
  if (const Tensor* cu = in.find("cu_seqlens"))
    r.cu_seqlens.assign(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
  else
    r.cu_seqlens = {0, r.seq_len};
  r.initial_state = get("initial_state");
  r.initial_conv_state = get("initial_conv_state");
  return r;
}

const Operation& operation() {
  static const LayerOperation op;
  return op;
}

}  // namespace deltacheck::ops::layer
