// The gated delta rule and its gradients as autodiff computes them through a graph whose every
// tensor is of the activation dtype (the precision profile autodiff=act, docs/tolerance.md): a
// model written in bf16 end to end, its gradients taken by torch.autograd or jax.grad.
//
// The forward is the token recurrence on tensors of that dtype: the inputs (g and the initial
// state included) cast to it; the L2 norm as x / sqrt(sum(x * x) + 1e-6); per token
// S_d = exp(g) S, p = k^T S_d, u = beta (v - p), S = S_d + k u^T, o = (scale q)^T S. Each op
// computes in fp32 and rounds its result once (a product or sum of two tensors elementwise, a
// contraction after its fp32 accumulation), as PyTorch's CPU ops on bf16 / fp16 tensors do. The
// backward is the reverse-mode derivative of that graph, op by op, each gradient an activation-
// dtype tensor too (a tensor used twice sums its two gradients in that dtype). With
// Rounding::kNone it is the fp32 recurrence differentiated the same way.
//
// Like the rest of reference/, written from the rule's definition: nothing of kernels/.
#pragma once

#include "reference/gated_delta_rule.h"
#include "reference/gated_delta_rule_backward.h"
#include "reference/rounding.h"

namespace deltacheck::reference {

// Zeroed gradients shaped for `args` (dh0 [N, HV, K, V]): what both backwards fill.
GatedDeltaRuleGradients zero_gradients(const GatedDeltaRuleArgs& args);

// o and the final state, each an activation-dtype value (returned in double).
GatedDeltaRuleResult gated_delta_rule_autodiff(const GatedDeltaRuleArgs& args, Rounding graph);

// The gradients of q, k, v, g, beta and the initial state, each an activation-dtype value; as
// gated_delta_rule_backward (cu_seqlens may end before T: the tail gets exact zeros).
GatedDeltaRuleGradients gated_delta_rule_backward_autodiff(const GatedDeltaRuleArgs& args,
                                                           const double* d_output,
                                                           const double* d_final_state,
                                                           Rounding graph);

}  // namespace deltacheck::reference
