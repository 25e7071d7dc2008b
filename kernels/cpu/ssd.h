// The CPU Mamba2 SSD forward: the chunked form (fp32 accumulation, threaded over sequence x head,
// the chunk's products through chunk_gemm.h) and the one-token state update a decode batch takes
// (selective_state_update's arithmetic).
#pragma once

#include "core/status.h"
#include "kernels/common/ssd_params.h"

namespace deltacheck::kernels::cpu {

// The discretized step of one token and head: clamp(softplus(raw + dt_bias), dt_min, dt_max).
float ssd_dt(const SsdParams& p, float raw, int64_t head);
// Checks p; InvalidArgument / Unsupported naming what is wrong.
Status check_ssd_params(const SsdParams& p);
Status chunked_ssd(const SsdParams& p);
// One token per sequence (every sequence of length 1, or batch rows of T = 1): the recurrence
// step S <- exp(dt A) S + dt x B^T, y = S C + D x.
Status ssd_state_update(const SsdParams& p);

}  // namespace deltacheck::kernels::cpu
