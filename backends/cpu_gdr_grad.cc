// The cpu backend's gdr_grad cases: the chunked CPU backward (kernels/cpu/
// gated_delta_rule_backward.h) on the case's tensors.
#include "backends/backends.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "ops/gdr/problem.h"
#include "ops/gdr_grad/params.h"

namespace deltacheck::backends {

kernels::GatedDeltaRuleBackwardParams gdr_grad_params(const cases::Case& c,
                                                      const cases::TensorMap& in,
                                                      cases::TensorMap& out) {
  const ops::gdr_grad::Params p = ops::gdr_grad::decode(c);
  kernels::GatedDeltaRuleBackwardParams b;
  b.forward = ops::gdr::kernel_params(p.rule, in, out);  // no o or final_state among the outputs
  b.d_output = in.at("do").data();
  if (const cases::Tensor* dht = in.find("dht")) b.d_final_state = dht->as<float>();
  b.dq = out.at("dq").data();
  b.dk = out.at("dk").data();
  b.dv = out.at("dv").data();
  b.dg = out.at("dg").as<float>();
  b.dbeta = out.at("dbeta").data();
  if (cases::Tensor* dh0 = out.find("dh0")) b.dh0 = dh0->as<float>();
  return b;
}

Status run_cpu_gdr_grad_case(const cases::Case& c, const cases::TensorMap& in,
                             cases::TensorMap& out) {
  return kernels::cpu::gated_delta_rule_backward(gdr_grad_params(c, in, out));
}

}  // namespace deltacheck::backends
