// CUDA kernels for the gated delta rule on raw device buffers (docs/semantics.md, "Gated delta
// rule").
//
// chunked_gated_delta_rule: the chunked (WY / UT-transform) form for prefill, one CTA per
// (sequence, value head, block of 32 value columns), the state slice in shared memory, chunks of
// at most 64 tokens that never straddle a sequence boundary. recurrent_gated_delta_rule: the plain
// token-by-token recurrence in fp32, the same-precision baseline. recurrent_decode: the same
// recurrence in place on a state pool, optionally writing the state after every token.
//
// The parameter struct is kernels/common/gated_delta_rule_params.h, the CPU kernels' own; every
// pointer is a device pointer. All calls are asynchronous on `stream`: a
// returned Ok means the launch was accepted, not that the kernel has finished.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"
#include "kernels/common/recurrent_decode_params.h"

namespace deltacheck::kernels::cuda {

// Whether the chunked kernel can run p, judged from the host-side fields only (shapes, pointers,
// sizes, dtype). InvalidArgument for an inconsistent problem, Unsupported (with the reason) for a
// valid one the kernel does not handle (K > 128, chunk_size > 64). The recurrent kernels accept the
// same problems with any chunk_size (they ignore it). Every entry point checks this first.
Status gated_delta_rule_can_implement(const GatedDeltaRuleParams& p);

// Checks the device-side layout: cu_seqlens starts at 0, never decreases and ends at T (with
// allow_tail, as the backward takes it: at most T); every slot is < num_state_rows and
// non-negative slots are distinct. Copies both arrays to the host and synchronizes `stream`. The
// kernels themselves skip a sequence whose bounds or slot are out of range (writing nothing for
// it) instead of touching memory outside the buffers.
Status validate_sequence_layout(const GatedDeltaRuleParams& p, cudaStream_t stream,
                                bool allow_tail = false);

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);
Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);

// Decode in place on a state pool (kernels/common/recurrent_decode_params.h, the CPU kernel's
// own parameters; every pointer is a device pointer, and the kernel ignores num_threads).
using kernels::RecurrentDecodeParams;

// The recurrent kernel on the decode layout (the same kernel as recurrent_gated_delta_rule).
Status recurrent_decode(const RecurrentDecodeParams& p, cudaStream_t stream);

}  // namespace deltacheck::kernels::cuda
