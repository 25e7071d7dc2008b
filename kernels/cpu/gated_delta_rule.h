// CPU kernels for the gated delta rule: raw buffers in, no harness types.
//
// chunked_gated_delta_rule: the chunked (WY / UT-transform) form with fp32 accumulation; chunks
// never straddle a sequence boundary. recurrent_gated_delta_rule: the plain token-by-token
// recurrence in fp32 (an implementation under test like the chunked one; the tolerance
// baselines live in reference/ and share no code with these kernels).
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cpu {

// Ok, or InvalidArgument naming what makes p an invalid problem (what both kernels check first).
Status check_gated_delta_rule_params(const GatedDeltaRuleParams& p);

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p);
Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p);

}  // namespace deltacheck::kernels::cpu
