// Mapping of gdr cases onto kernel parameters.
#include "ops/gdr/problem.h"

namespace deltacheck::ops::gdr {

kernels::GatedDeltaRuleParams kernel_dims(const Params& d) {
  kernels::GatedDeltaRuleParams p;
  p.batch = d.B;
  p.seq_len = d.T;
  p.num_heads = d.H;
  p.num_value_heads = d.HV;
  p.key_dim = d.K;
  p.value_dim = d.V;
  p.dtype = cases::kernel_dtype(d.dtype);
  p.use_qk_l2norm = d.l2;
  return p;
}

kernels::GatedDeltaRuleParams kernel_params(const cases::Case& c, const cases::TensorMap& in,
                                            cases::TensorMap& out) {
  return kernel_params(decode(c), in, out);
}

}  // namespace deltacheck::ops::gdr
