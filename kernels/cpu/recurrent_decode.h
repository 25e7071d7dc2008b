// CPU gated delta rule decode, in place on a state pool (continuous batching): N sequences, each
// with tokens_per_seq new tokens (1: plain decode; > 1: speculative / multi-token decode), fp32
// state and accumulation. The rule per token, in this order (docs/semantics.md):
//   S <- exp(g_t) * S;  u = beta_t * (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale * q_t)
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/common/recurrent_decode_params.h"

namespace deltacheck::kernels::cpu {

// The parameters: kernels/common/recurrent_decode_params.h (host pointers).
using kernels::RecurrentDecodeParams;

Status recurrent_decode(const RecurrentDecodeParams& p);

}  // namespace deltacheck::kernels::cpu
