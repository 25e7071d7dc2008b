// The backward of the gated delta rule in FP64: the oracle for gradient checks.
//
// Given the forward's inputs (GatedDeltaRuleArgs), `do` (the gradient of the output o) and
// optionally `dht` (the gradient of the final state), returns the gradients of q, k, v, g, beta
// and the initial state, each shaped like its input (docs/gradients.md, docs/semantics.md,
// "Gradients"). Per sequence and value head the forward recurrence is replayed from its initial
// state and then run in reverse, token by token; the in-kernel L2 norm and the scale are
// differentiated through, and dq, dk sum over the value heads that share a key head.
//
// Unlike the forward, cu_seqlens may end before T: tokens past cu_seqlens[-1] belong to no
// sequence and get exactly zero gradient. A zero-length sequence's dh0 equals its dht.
//
// Nothing here is shared with the kernels under test (kernels/); the independent cross-check
// (complex-step differentiation of a separate forward) lives in
// tests/reference/test_gdr_backward.cc.
#pragma once

#include <vector>

#include "reference/gated_delta_rule.h"

namespace deltacheck::reference {

struct GatedDeltaRuleGradients {
  std::vector<double> dq;     // [B, T, H, K]
  std::vector<double> dk;     // [B, T, H, K]
  std::vector<double> dv;     // [B, T, HV, V]
  std::vector<double> dg;     // [B, T, HV]
  std::vector<double> dbeta;  // [B, T, HV]
  std::vector<double> dh0;    // [N, HV, K, V] (also when the forward had no initial state)
};

// d_output: [B, T, HV, V], required. d_final_state: [N, HV, K, V]; nullptr means zero.
// Throws std::invalid_argument naming the inconsistency when the problem is not valid.
GatedDeltaRuleGradients gated_delta_rule_backward(const GatedDeltaRuleArgs& args,
                                                  const double* d_output,
                                                  const double* d_final_state);

// The same backward in the arithmetic of a tolerance baseline: compute type fp32 or FP64, and
// either the token recurrence (Formulation::kRecurrent): `how.operands` rounds the matmul operands
// (normalized q and k, do, the replayed states, u, err and the state gradient where they enter a
// product) to bf16 / fp16 / TF32; or the chunked form (Formulation::kChunked, chunks of
// `how.chunk_size` tokens of each sequence) as FLA's and Transformers' naive chunk functions
// compute under autograd: chunk-local cumulative gates G, the UT transform, and dg as the
// reverse cumulative sum of dG; `how.operands` rounds its operands (normalized q and k, do), what
// a tensor-core kernel stores between passes (the UT matrix, w, u, v_new) and the state and state
// gradient where they enter a product. `how.output` rounds the activation gradients (dq, dk, dv,
// dbeta) as a kernel stores them; dg and dh0 stay in the compute type. In FP64 without rounding
// both forms equal the oracle (the recurrence bit for bit, the chunked form to rounding).
GatedDeltaRuleGradients gated_delta_rule_backward(const GatedDeltaRuleArgs& args,
                                                  const double* d_output,
                                                  const double* d_final_state,
                                                  const Arithmetic& how);

}  // namespace deltacheck::reference
