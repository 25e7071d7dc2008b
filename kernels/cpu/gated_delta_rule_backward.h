// CPU backward of the gated delta rule on raw buffers (kernels/common/gated_delta_rule_params.h,
// GatedDeltaRuleBackwardParams): fp32 accumulation, bf16/fp16/fp32 activations like the forward.
//
// gated_delta_rule_backward: the entry point (what a CPU backend calls): the chunked kernel, or
// the recurrent one when p.chunked is false.
//
// chunked_gated_delta_rule_backward: the chunked (WY / UT-transform) form, as FLA's
// chunk_gated_delta_rule_bwd computes it: per (sequence, value head) a forward pass over the
// chunks of chunk_size tokens keeps each chunk's start state and its u = (I + A)^-1 diag(beta)
// (v - diag(P) K S0), then a reverse pass carries dS from chunk to chunk and forms the chunk's
// dq, dk, dv, dbeta and dg with matrix products (kernels/cpu/chunk_gemm.h). dg is summed from
// terms that each carry the token's own decay (docs/gradients.md, "The chunked kernel"), never as
// a difference of cumulative terms. Chunks never cross a sequence boundary.
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

Status gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p);
Status chunked_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p);
Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p);

}  // namespace deltacheck::kernels::cpu
