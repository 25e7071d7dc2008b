// CUDA backward of the gated delta rule on raw device buffers (kernels/common/
// gated_delta_rule_params.h, GatedDeltaRuleBackwardParams; docs/gradients.md): fp32 accumulation,
// bf16 / fp16 / fp32 activations as the forward kernels take them, GVA, the in-kernel L2 norm and
// the scale, optional initial state, dht and dh0, cu_seqlens with zero-length sequences and a
// padding tail (every gradient past cu_seqlens[-1] exactly zero), state slots.
//
// recurrent_gated_delta_rule_backward: the token recurrence, checkpointed and run in reverse, one
// CTA per (sequence, value head, block of 32 value columns), then a reduction kernel per (token,
// key head) in a fixed order: deterministic (no atomics), the same bits every run. The device code
// is gated_delta_rule_backward_math.h (host/device, emulated on the host by
// tests/kernels/cuda_host/). Every pointer is a device pointer; p.chunked is ignored (there is no
// chunked CUDA backward), forward.chunk_size (1 .. 64) is the number of tokens between kept states.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/common/gated_delta_rule_params.h"

namespace deltacheck::kernels::cuda {

// Whether the backward can run p, from the host-side fields only: the forward's checks
// (gated_delta_rule_can_implement: K <= 128, chunk_size 1 .. 64, dtype fp32 / bf16 / fp16) and
// the gradient buffers. InvalidArgument for an inconsistent problem, Unsupported with the reason
// for a valid one it does not take.
Status gated_delta_rule_backward_can_implement(const GatedDeltaRuleBackwardParams& p);

// Device workspace the backward allocates (cudaMallocAsync on the stream, freed on it after the
// kernels) for a grid of `ctas` backward CTAs: the checkpoints, one block of replayed states per
// CTA, the per-(token, value head, value block) partials of dq, dk, dbeta and dg, a live flag per
// token.
int64_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaRuleBackwardParams& p,
                                                  int64_t ctas);

// Checks p (can_implement, and the device-side layout: copies cu_seqlens and state_slots to the
// host and synchronizes `stream`), then queues the kernels on `stream`. A returned Ok means the
// work was queued, not that it has finished.
Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& p,
                                           cudaStream_t stream);

}  // namespace deltacheck::kernels::cuda
