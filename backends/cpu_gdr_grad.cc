// The cpu backend's gdr_grad cases: the chunked CPU backward (kernels/cpu/
// gated_delta_rule_backward.h) on the case's tensors.
#include "backends/backends.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "ops/gdr_grad/problem.h"

namespace deltacheck::backends {

kernels::GatedDeltaRuleBackwardParams gdr_grad_params(const cases::Case& c,
                                                      const cases::TensorMap& in,
                                                      cases::TensorMap& out) {
  return ops::gdr_grad::kernel_params(ops::gdr_grad::decode(c), in, out);
}

Status run_cpu_gdr_grad_case(const cases::Case& c, const cases::TensorMap& in,
                             cases::TensorMap& out) {
  return kernels::cpu::gated_delta_rule_backward(gdr_grad_params(c, in, out));
}

}  // namespace deltacheck::backends
