// CUDA builders for attention masks and packed-sequence boundaries (docs/semantics.md, "Masks"), on
// raw device buffers. The rules are exactly those of reference/mask.h, which the results are
// compared to bit for bit:
//   causal   kv <= q_abs                                  (q_abs = q_offset[b] + q)
//   window   kv >  q_abs - W                              (W = sliding_window > 0)
//   chunk    floor((kv - lp) / C) == floor((q_abs - lp) / C)   (lp = leading zeros of the
//            padding row, so chunks are counted from the first real token)
//   padding  padding_mask[b, kv] != 0
//   segment  segment(b, kv) == segment(b, q), with keys before q_offset in segment 0 (the cached
//            prefix), new tokens in their own segment and keys past the new tokens in none.
// A new segment starts at the first new token and wherever position_ids (row 0) does not increase
// by exactly 1. All calls are asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/status.h"

namespace deltacheck::kernels::cuda {

struct MaskParams {
  int64_t batch = 1;                      // B
  int64_t q_len = 0;                      // new (query) tokens per row
  int64_t kv_length = 0;                  // key buffer length (max_cache_len for a static cache)
  int64_t q_offset = 0;                   // cache position of query 0, shared by every row ...
  const int64_t* q_offsets = nullptr;     // ... or [B] per row on the device (overrides q_offset)
  bool causal = true;                     // false: bidirectional; window and chunk need causal
  int64_t sliding_window = 0;             // W, 0 = none
  int64_t chunk_size = 0;                 // C, 0 = none
  const uint8_t* padding_mask = nullptr;  // [B, kv_length], nonzero = real token; nullptr: all real
  const int64_t* position_ids = nullptr;  // [position_id_rows, B, q_len]; nullptr: no packing
  int64_t position_id_rows = 1;           // 1, or 3 / 4 for multimodal rotary ids: row 0 decides
  bool static_cache = false;              // masks are always needed (no effect on the values)
};

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
