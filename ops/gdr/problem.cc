// Mapping of gdr cases onto kernel parameters.
#include "ops/gdr/problem.h"

namespace deltacheck::ops::gdr {

kernels::GatedDeltaRuleParams kernel_params(const Params& d, const cases::TensorMap& in,
                                            cases::TensorMap& out) {
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

kernels::GatedDeltaRuleParams kernel_params(const cases::Case& c, const cases::TensorMap& in,
                                            cases::TensorMap& out) {
  return kernel_params(decode(c), in, out);
}

}  // namespace deltacheck::ops::gdr
