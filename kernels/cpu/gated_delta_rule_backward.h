// CPU backward of the gated delta rule on raw buffers (kernels/common/gated_delta_rule_params.h,
// GatedDeltaRuleBackwardParams): fp32 accumulation, bf16/fp16/fp32 activations like the forward.
//
// recurrent_gated_delta_rule_backward: per (sequence, value head), the forward recurrence keeps
// its state at every chunk_size-th token; each block is then replayed from its stored state
// (keeping the state after every token of the block) and run in reverse, token by token. dq and
// dk, summed over the value heads of a group and taken through the L2 norm, are finished in a
// second pass over tokens, so the lanes never write the same element and the result does not
// depend on the thread count.
#pragma once

#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cpu {

Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p);

}  // namespace deltacheck::kernels::cpu
