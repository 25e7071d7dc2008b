// Reads a gdr case's dimensions and tensors into the raw form kernels take.
#pragma once

#include "cases/case.h"
#include "cases/tensor.h"
#include "kernels/cpu/gated_delta_rule.h"

namespace deltacheck::harness {

struct GdrDims {
  cases::Layout layout;
  int64_t B, T, H, HV, K, V, N;
  cases::DType dtype;
  bool l2, final_state;
};

GdrDims gdr_dims(const cases::Case& c);

// Every sequence has exactly one token (a decode batch): backends route such pool calls to their
// decode kernel, as serving runtimes do.
bool one_token_per_sequence(const GdrDims& d);

// Kernel parameters pointing into `inputs` and `outputs` (o, and final_state when the case keeps
// it). The caller may adjust fields (the deliberately wrong backends do).
kernels::GatedDeltaRuleParams gdr_params(const cases::Case& c, const cases::TensorMap& inputs,
                                         cases::TensorMap& outputs);

}  // namespace deltacheck::harness
