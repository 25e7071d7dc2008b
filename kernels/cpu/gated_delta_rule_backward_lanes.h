// What the CPU backward kernels of the gated delta rule share (kernels/cpu/
// gated_delta_rule_backward.cc, the recurrent one, and gated_delta_rule_backward_chunked.cc): the
// checks, the lanes, the loads of normalized q and k, and the driver that runs one lane function
// per (sequence, value head) and then finishes dq and dk per token.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cpu::backward_lanes {

// One (sequence, value head) of the problem: tokens begin .. begin + length - 1 of batch row `row`.
struct Lane {
  int64_t row, begin, length, seq, head;
  int32_t slot;
};

// A lane's work. Writes dv, dg, dbeta of its tokens, the gradients w.r.t. the scaled, normalized
// q and the normalized k of its value head into dq_hat / dk_hat ([B, T, HV, K], fp32), and its
// dh0 row. Called from several threads at once, one lane each. With dq_hat == nullptr (only
// when HV == H and the caller asked for it) the lane writes dq and dk of its tokens itself.
using LaneFn = std::function<void(const Lane&, float* dq_hat, float* dk_hat)>;

// Checks bp, runs fn on every live lane (longest first, threaded), then per token sums dq_hat and
// dk_hat over the value heads of each key head (in head order), takes them through the norm and
// the scale into dq and dk, and writes zeros for every token that belongs to no live sequence.
// lanes_write_qk: without GVA (HV == H), the lanes finish dq and dk themselves (dq_hat and
// dk_hat are nullptr), which saves a round trip through memory.
Status run_backward(const GatedDeltaRuleBackwardParams& bp, const LaneFn& fn,
                    bool lanes_write_qk = false);

// Sum of a[i] b[i] with 16 partial sums, so the loop vectorizes without reassociation flags.
float dot(const float* a, const float* b, int64_t n);

// Row `index` of q or k ([.., K] in dtype) in fp32 as the forward uses it: x / sqrt(sum x^2 +
// 1e-6) when asked (x unchanged otherwise); returns that factor.
float load_normalized(const GatedDeltaRuleParams& p, const void* src, int64_t index, float* dst);

// p.scale, or K^-0.5 when it is <= 0.
float resolved_scale(const GatedDeltaRuleParams& p);

}  // namespace deltacheck::kernels::cpu::backward_lanes
