// A gdr case's tensors in the raw form kernels take.
#pragma once

#include "cases/case.h"
#include "cases/tensor.h"
#include "kernels/common/gated_delta_rule_params.h"
#include "ops/gdr/params.h"

namespace deltacheck::ops::gdr {

// Kernel parameters pointing into `inputs` and `outputs` (o, and final_state when the case keeps
// it). The caller may adjust fields (the deliberately wrong backends do).
kernels::GatedDeltaRuleParams kernel_params(const Params& d, const cases::TensorMap& inputs,
                                            cases::TensorMap& outputs);
kernels::GatedDeltaRuleParams kernel_params(const cases::Case& c, const cases::TensorMap& inputs,
                                            cases::TensorMap& outputs);

}  // namespace deltacheck::ops::gdr
