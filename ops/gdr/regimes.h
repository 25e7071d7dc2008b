// The gdr case parameter `regime`: where the inputs sit, beyond random (docs/cases.md#regimes).
//   rand       every input random (the generator's inputs before regimes; absent from the id)
//   converged  converged memory: v_t = S^T k_t + r_t with |r_t| = kConvergedResidual |v_t|, where
//              S is the state just before token t's update (after its decay), computed in FP64
//              from the inputs as the kernel sees them (rounded to the dtype, L2-normalized when
//              l2=1). Rounding S^T k (or v) to bf16 before the subtraction erases most of r
//              (attention-gym#465).
//   tinyqk     every q and k token scaled to a norm log-uniform in [1e-4, 1e-2]: the in-kernel L2
//              norm's eps form decides the result (unslothai/llama.cpp#156)
//   hugeqk     norms log-uniform in [1e2, 1e4]: sums of squares that overflow fp16
#pragma once

#include <string>

#include "cases/op.h"
#include "cases/rng.h"
#include "cases/tensor.h"
#include "ops/gdr/params.h"

namespace deltacheck::ops::gdr {

// The residual's share of |v_t| in regime=converged, before v is rounded to the dtype. 2^-6: a
// bf16 rounding of S^T k moves u = beta (v - S^T k) by ~2^-9 |v| / sqrt(3) per element (ulp
// spacing 2^-7..2^-8 of the value, uniform error), about 12% of the residual; an fp32-state
// computation moves it by ~1e-7 |v|, 1e-5 of it; and the bf16 rounding of v itself (the input
// the oracle sees) leaves the residual within ~10% of 2^-6 (tests/ops/test_gdr_regimes.cc).
inline constexpr double kConvergedResidual = 1.0 / 64.0;

// The norm range of q and k tokens in regime=tinyqk / hugeqk.
inline constexpr double kTinyNormMin = 1e-4, kTinyNormMax = 1e-2;
inline constexpr double kHugeNormMin = 1e2, kHugeNormMax = 1e4;

// The norm q/k token `i` of stream `st` is scaled to in `regime` (log-uniform in the regime's
// range); 0 for regimes that keep the generated norm.
double qk_token_norm(Regime regime, const cases::Stream& st, uint64_t i);

// What regime=converged asks of the other parameters; empty when the case can have it.
std::string check_regime(const Params& d);

// regime=converged: replaces v in `m` (q, k, g, beta and initial_state already generated and
// rounded) by values close to the state's prediction, sequence by sequence with each sequence's
// streams (the isolation probe's salt).
void converge_values(const Params& d, const cases::GenOptions& o, cases::TensorMap& m);

}  // namespace deltacheck::ops::gdr
