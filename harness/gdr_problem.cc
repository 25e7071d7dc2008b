// Mapping of gdr cases onto kernel parameters.
#include "harness/gdr_problem.h"

#include <algorithm>

namespace deltacheck::harness {

using cases::DType;

GdrDims gdr_dims(const cases::Case& c) {
  GdrDims d;
  d.layout = cases::Layout::parse(c.get("layout"));
  d.B = d.layout.batch();
  d.T = d.layout.row_length();
  d.H = c.get_int("H");
  d.HV = c.get_int("HV");
  d.K = c.get_int("K");
  d.V = c.get_int("V");
  d.N = d.layout.num_seqs();
  const std::string dt = c.get("dtype");
  d.dtype = dt == "bf16" ? DType::kBF16 : dt == "fp16" ? DType::kF16 : DType::kF32;
  d.l2 = c.get_bool("l2");
  d.final_state = c.get("cache") != "none";  // pool modes keep states in the pool instead
  return d;
}

bool one_token_per_sequence(const GdrDims& d) {
  const auto& l = d.layout.lengths;
  return !l.empty() && std::all_of(l.begin(), l.end(), [](int64_t n) { return n == 1; });
}

kernels::GatedDeltaRuleParams gdr_params(const cases::Case& c, const cases::TensorMap& in,
                                         cases::TensorMap& out) {
  const GdrDims d = gdr_dims(c);
  kernels::GatedDeltaRuleParams p;
  p.batch = d.B;
  p.seq_len = d.T;
  p.num_heads = d.H;
  p.num_value_heads = d.HV;
  p.key_dim = d.K;
  p.value_dim = d.V;
  p.dtype = cases::scalar_from_dtype(d.dtype);
  p.q = in.at("q").data();
  p.k = in.at("k").data();
  p.v = in.at("v").data();
  p.g = in.at("g").as<float>();
  p.beta = in.at("beta").data();
  p.o = out.at("o").data();
  if (const cases::Tensor* cu = in.find("cu_seqlens")) {
    p.cu_seqlens = cu->as<int64_t>();
    p.num_seqs = cu->numel() - 1;
  }
  if (const cases::Tensor* s0 = in.find("initial_state")) p.initial_state = s0->as<float>();
  if (cases::Tensor* fs = out.find("final_state")) p.final_state = fs->as<float>();
  p.use_qk_l2norm = d.l2;
  return p;
}

}  // namespace deltacheck::harness
