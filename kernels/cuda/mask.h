// CUDA builders for attention masks and packed-sequence boundaries on raw device buffers. The
// contract and the rules are kernels/common/mask_params.h; the results are compared bit for bit to
// reference/mask.h. All calls are asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/common/mask_params.h"

namespace deltacheck::kernels::cuda {

// InvalidArgument naming the inconsistency (sizes, q_offset + q_len > kv_length, ...), judged from
// the host-side fields: per-row q_offsets stay on the device and are the caller's to keep in
// range (the mask is still defined for them, rule by rule).
Status validate(const MaskParams& p);

// out: [B, 1, q_len, kv_length] on the device, 1 = may attend. One CTA per (batch row, query): a
// first pass finds the row's left padding and the bounds of the query's segment, a second writes
// the row.
Status build_bool_mask(const MaskParams& p, uint8_t* out, cudaStream_t stream);

// Sequence boundaries of a padding-free batch from position_ids [batch, len] (flattened to
// batch * len tokens, as Transformers does): a sequence starts at every row start and wherever the
// position does not increase by exactly 1. Outputs, all on the device:
//   cu_seqlens      [batch * len + 1] capacity; entries 0..N hold the boundaries
//   sequence_index  [batch * len] sequence of each token, or nullptr
//   num_segments    [1] N
//   max_seqlen      [1] the longest sequence (0 when there are no tokens), or nullptr
// One CTA walks the tokens (a block-wide scan per tile of 1024).
struct SegmentParams {
  const int64_t* position_ids = nullptr;
  int64_t batch = 1;
  int64_t len = 0;
  int64_t* cu_seqlens = nullptr;
  int64_t* sequence_index = nullptr;
  int64_t* num_segments = nullptr;
  int64_t* max_seqlen = nullptr;
};

Status segments_from_position_ids(const SegmentParams& p, cudaStream_t stream);

}  // namespace deltacheck::kernels::cuda
