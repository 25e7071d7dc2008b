// A gdr case's tensors in the raw form kernels take.
#pragma once

#include "cases/case.h"
#include "cases/tensor.h"
#include "kernels/common/gated_delta_rule_params.h"
#include "ops/gdr/params.h"

namespace deltacheck::ops::gdr {

// The problem's sizes as kernels take them (batch, seq_len, heads, dims, dtype, l2 norm); no
// pointers, no num_seqs.
kernels::GatedDeltaRuleParams kernel_dims(const Params& d);

// Kernel parameters pointing into `inputs` and `outputs` (o when present, and final_state when the
// case keeps it; cu_seqlens and num_seqs from its tensor): host tensors (cases::TensorMap) or a
// backend's device mirrors of them (any map with at(name) and find(name) -> pointer, whose tensors
// have data(), nbytes() and as<T>()). The caller may adjust fields (the deliberately wrong backends
// do).
template <typename In, typename Out>
kernels::GatedDeltaRuleParams kernel_params(const Params& d, const In& inputs, Out& outputs) {
  kernels::GatedDeltaRuleParams p = kernel_dims(d);
  p.q = inputs.at("q").data();
  p.k = inputs.at("k").data();
  p.v = inputs.at("v").data();
  p.g = inputs.at("g").template as<float>();
  p.beta = inputs.at("beta").data();
  if (auto* o = outputs.find("o")) p.o = o->data();
  if (const auto* cu = inputs.find("cu_seqlens")) {
    p.cu_seqlens = cu->template as<int64_t>();
    p.num_seqs = static_cast<int64_t>(cu->nbytes() / sizeof(int64_t)) - 1;
  }
  if (const auto* s0 = inputs.find("initial_state")) p.initial_state = s0->template as<float>();
  if (auto* fs = outputs.find("final_state")) p.final_state = fs->template as<float>();
  return p;
}
kernels::GatedDeltaRuleParams kernel_params(const cases::Case& c, const cases::TensorMap& inputs,
                                            cases::TensorMap& outputs);

}  // namespace deltacheck::ops::gdr
