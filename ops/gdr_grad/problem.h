// A gdr_grad case's tensors in the raw form the backward kernels take
// (kernels/common/gated_delta_rule_params.h, GatedDeltaRuleBackwardParams).
#pragma once

#include "kernels/common/gated_delta_rule_params.h"
#include "ops/gdr/problem.h"
#include "ops/gdr_grad/params.h"

namespace deltacheck::ops::gdr_grad {

// Backward parameters pointing into `inputs` and `outputs`: host tensors (cases::TensorMap) or a
// backend's device mirrors of them, as ops::gdr::kernel_params takes them. The forward's o and
// final_state are not among a gdr_grad case's outputs; dh0 is set when the case has it.
template <typename In, typename Out>
kernels::GatedDeltaRuleBackwardParams kernel_params(const Params& p, const In& inputs,
                                                    Out& outputs) {
  kernels::GatedDeltaRuleBackwardParams b;
  b.forward = gdr::kernel_params(p.rule, inputs, outputs);
  b.d_output = inputs.at("do").data();
  if (const auto* dht = inputs.find("dht")) b.d_final_state = dht->template as<float>();
  b.dq = outputs.at("dq").data();
  b.dk = outputs.at("dk").data();
  b.dv = outputs.at("dv").data();
  b.dg = outputs.at("dg").template as<float>();
  b.dbeta = outputs.at("dbeta").data();
  if (auto* dh0 = outputs.find("dh0")) b.dh0 = dh0->template as<float>();
  return b;
}

}  // namespace deltacheck::ops::gdr_grad
