// The gdr operation. Outputs: o [B,T,HV,V] (dtype of v) and final_state [N,HV,K,V] (fp32); in the
// pool modes the state pool after the call instead of final_state, and for multi-token decode
// (spec) the state after every draft token. The FP64 oracle is reference/gated_delta_rule; the
// tolerance baselines are the formulations in real use, from the same reference source in fp32
// (rule_baselines below). Pool and spec cases are evaluated as plain
// prefills of repacked sequences (a sequence per pool entry, a prefix per draft token), so one
// code path computes every expectation.
#include "ops/operation.h"

#include <functional>
#include <stdexcept>

#include "ops/gdr/params.h"
#include "ops/gdr/serving.h"
#include "ops/repack.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops::gdr {
namespace {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;

}  // namespace

reference::GatedDeltaRuleArgs reference_args(const Params& d, const TensorMap& in,
                                             std::vector<std::vector<double>>& buffers) {
  auto values = [&](const Tensor& t) {
    buffers.push_back(t.to_double());
    return buffers.back().data();
  };
  buffers.reserve(6);
  reference::GatedDeltaRuleArgs a;
  a.batch = d.B;
  a.seq_len = d.T;
  a.num_heads = d.H;
  a.num_value_heads = d.HV;
  a.key_dim = d.K;
  a.value_dim = d.V;
  a.q = values(in.at("q"));
  a.k = values(in.at("k"));
  a.v = values(in.at("v"));
  a.g = values(in.at("g"));
  a.beta = values(in.at("beta"));
  if (const Tensor* cu = in.find("cu_seqlens"))
    a.cu_seqlens.assign(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
  if (const Tensor* t = in.find("initial_state")) a.initial_state = values(*t);
  a.use_qk_l2norm = d.l2;
  return a;
}

namespace {

// The reference arguments of a (non-pool) case.
reference::GatedDeltaRuleArgs reference_args(const cases::Case& c, const TensorMap& in,
                                             std::vector<std::vector<double>>& buffers) {
  return reference_args(decode(c), in, buffers);
}

Values as_values(reference::GatedDeltaRuleResult r) {
  return {{"o", std::move(r.output)}, {"final_state", std::move(r.final_state)}};
}

// FP64 prefill of a (non-pool) case.
Values reference_prefill(const cases::Case& c, const TensorMap& in) {
  std::vector<std::vector<double>> buffers;
  return as_values(reference::gated_delta_rule(reference_args(c, in, buffers)));
}

// Pool and spec cases through a prefill evaluation: every entry's (or draft prefix's) initial
// state is its pool row; results are scattered back into the pool.
Values evaluate_pooled(const cases::Case& c, const TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const bool spec = d.cache == Cache::kSpec;
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  const Tensor& pool = in.at("state_pool");
  const int64_t per = d.HV * d.K * d.V;
  std::vector<Piece> pieces;
  for (int64_t s = 0; s < d.N; ++s) {
    if (slots[s] < 0) continue;  // padding entry
    if (spec)
      for (int64_t t = 0; t < d.layout.lengths[s]; ++t) pieces.push_back({s, 0, t + 1});
    else
      pieces.push_back({s, 0, d.layout.lengths[s]});
  }
  std::vector<double> pool_after = pool.to_double();
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.B * d.T * d.HV * d.V), 0.0)},
             {"state_pool", pool_after}};
  if (spec) out["token_states"].assign(static_cast<size_t>(d.N * d.T * per), 0.0);
  if (pieces.empty()) return out;
  Repacked rp = repack(c, in, pieces, {{"cache", "prefill"}, {"state", "rand"}});
  Tensor s0("initial_state", DType::kF32, {static_cast<int64_t>(pieces.size()), d.HV, d.K, d.V});
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int64_t j = 0; j < per; ++j) s0.set(i * per + j, pool.get(slots[pieces[i].seq] * per + j));
  rp.tensors.add(std::move(s0));
  const Values r = eval(rp.c, rp.tensors);
  const int64_t row = d.HV * d.V;
  int64_t token = 0;  // first token row of piece i in the repacked case
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const int64_t dst = token_row(d.layout, p.seq, 0);
    const bool last = !spec || p.length == d.layout.lengths[p.seq];
    if (last) {
      for (int64_t j = 0; j < p.length * row; ++j)
        out["o"][dst * row + j] = r.at("o")[token * row + j];
      for (int64_t j = 0; j < per; ++j)
        out["state_pool"][slots[p.seq] * per + j] = r.at("final_state")[i * per + j];
    }
    if (spec)
      for (int64_t j = 0; j < per; ++j)
        out["token_states"][(p.seq * d.T + p.length - 1) * per + j] =
            r.at("final_state")[i * per + j];
    token += p.length;
  }
  return out;
}

class GdrOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.serving()) return serving_outputs(d);
    std::vector<OutputSpec> o{{"o", d.dtype, {d.B, d.T, d.HV, d.V}}};
    // States are fp32, computed from activations of the case's dtype by kernels that may read
    // them as matmul operands of that dtype: their tolerance follows the activation dtype.
    if (!d.pooled()) {
      if (d.final_state) o.push_back({"final_state", DType::kF32, {d.N, d.HV, d.K, d.V}, d.dtype});
      return o;
    }
    const std::vector<int32_t> slots = pool_slots(d);
    const int64_t rows = pool_size(d), per = d.HV * d.K * d.V;
    OutputSpec pool{"state_pool", DType::kF32, {rows, d.HV, d.K, d.V}, d.dtype};
    std::vector<bool> used(static_cast<size_t>(rows), false);
    for (int64_t s = 0; s < d.N; ++s) {
      if (slots[s] >= 0) {
        used[slots[s]] = true;
        continue;
      }
      const int64_t b = token_row(d.layout, s, 0) * d.HV * d.V;
      o[0].dont_care.push_back({b, b + d.layout.lengths[s] * d.HV * d.V, "padding entry"});
    }
    for (int64_t r = 0; r < rows; ++r)
      if (!used[r])
        pool.must_be_unchanged.push_back(
            {r * per, (r + 1) * per, "slot " + std::to_string(r) + " (addressed by nobody)"});
    o.push_back(pool);
    if (d.cache == Cache::kSpec)
      o.push_back({"token_states", DType::kF32, {d.N, d.T, d.HV, d.K, d.V}, d.dtype});
    return o;
  }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    return evaluate(c, in, reference_prefill);
  }

  std::vector<Baseline> baselines(const cases::Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override {
    std::vector<Baseline> out;
    for (const reference::Arithmetic& how : rule_baselines(decode(c).dtype, precision))
      out.push_back(baseline_of(c, in, how));
    return out;
  }

  Baseline baseline(const cases::Case& c, const TensorMap& in, const PrecisionProfile& precision,
                    size_t i) const override {
    return baseline_of(c, in, rule_baselines(decode(c).dtype, precision).at(i));
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const Params d = decode(c);
    if (d.serving() && output == "state_pool") return serving_pool_slices(d);
    const int64_t per_state = d.HV * d.K * d.V;
    const std::vector<int32_t> slots =
        output == "state_pool" ? pool_slots(d) : std::vector<int32_t>{};
    std::vector<SeqSlice> s;
    for (int64_t i = 0; i < d.N; ++i) {
      const int64_t b = token_row(d.layout, i, 0), len = d.layout.lengths[i];
      if (output == "o") {
        s.push_back({i, b * d.HV * d.V, (b + len) * d.HV * d.V, d.HV * d.V});
      } else if (output == "token_states") {
        s.push_back({i, i * d.T * per_state, (i + 1) * d.T * per_state, per_state});
      } else if (output == "state_pool") {
        const int32_t slot = slots[i];
        if (slot >= 0)
          s.push_back({i, slot * per_state, (slot + 1) * per_state, 0});
        else
          s.push_back({i, 0, 0, 0});
      } else {
        s.push_back({i, i * per_state, (i + 1) * per_state, 0});
      }
    }
    return s;
  }

  std::vector<int64_t> sequence_lengths(const cases::Case& c) const override {
    return decode(c).layout.lengths;
  }

  TensorMajor major(const std::string& t) const override {
    if (t == "initial_state" || t == "final_state" || t == "state_slots" || t == "token_states" ||
        t == "block_slots" || t == "state_indices" || t == "num_accepted_tokens" || t == "parents")
      return TensorMajor::kSequence;
    if (t == "q" || t == "k" || t == "v" || t == "g" || t == "beta" || t == "o")
      return TensorMajor::kToken;
    return TensorMajor::kNone;
  }

  bool repackable(const cases::Case& c) const override {
    const Params d = decode(c);
    return !d.pooled() && !d.serving();
  }

  bool presume_leaks(const cases::Case& c) const override { return !decode(c).serving(); }

  std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.cache == Cache::kNone || d.pooled() || d.serving()) return {};
    return {{"final_state", "initial_state"}};
  }

  // cache=tree: the first wrong token with its parent and its request's tree shape.
  std::string explain_failure(const cases::Case& c, int64_t seq, int64_t token) const override {
    const Params d = decode(c);
    return d.cache == Cache::kTree ? describe_tree_token(d, seq, token) : "";
  }

  CallMode call_mode(const cases::Case& c) const override {
    const Params d = decode(c);
    if (d.cache == Cache::kChunked) return {CallMode::Kind::kChunked, d.calls};
    if (d.cache == Cache::kDynamic) return {CallMode::Kind::kDynamic, d.calls};
    return {};
  }

 private:
  Baseline baseline_of(const cases::Case& c, const TensorMap& in,
                       const reference::Arithmetic& how) const {
    auto run = [&how](const cases::Case& cc, const TensorMap& inputs) {
      std::vector<std::vector<double>> buffers;
      return as_values(reference::gated_delta_rule(reference_args(cc, inputs, buffers), how));
    };
    return {reference::describe(how), evaluate(c, in, run)};
  }

  Values evaluate(const cases::Case& c, const TensorMap& in, const Evaluate& eval) const {
    const Params d = decode(c);
    if (d.pooled()) return evaluate_pooled(c, in, eval);
    if (d.serving()) return evaluate_serving(c, in, eval);
    Values v = eval(c, in);
    if (!d.final_state) v.erase("final_state");
    return v;
  }
};

}  // namespace

const Operation& operation() {
  static const GdrOperation op;
  return op;
}

}  // namespace deltacheck::ops::gdr
