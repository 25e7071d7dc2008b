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
//   corrk      keys of a sequence and q/k head correlated (cosine ~kCorrKCosine, ops/regimes.h)
// The values, the norm ranges and the correlated keys are shared with the layer (ops/regimes.h);
// gdr_grad's forward inputs are gdr's.
#pragma once

#include <string>

#include "cases/op.h"
#include "cases/rng.h"
#include "cases/tensor.h"
#include "ops/gdr/params.h"
#include "ops/regimes.h"

namespace deltacheck::ops::gdr {

// What regime=converged asks of the other parameters; empty when the case can have it.
std::string check_regime(const Params& d);

// regime=converged: replaces v in `m` (q, k, g, beta and initial_state already generated and
// rounded) by values close to the state's prediction, sequence by sequence with each sequence's
// streams (the isolation probe's salt).
void converge_values(const Params& d, const cases::GenOptions& o, cases::TensorMap& m);

}  // namespace deltacheck::ops::gdr
