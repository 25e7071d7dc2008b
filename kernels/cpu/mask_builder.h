// CPU mask builder: the attention masks of docs/semantics.md "Masks" built row by row from allowed
// key intervals, plus the per-layer-type mapping and the segment derivations. Raw buffers in and
// out.
//
// Semantics (identical to the reference, which judges this builder bit for bit): query q of batch
// row b sits at q_abs = q_offset[b] + q; key kv may be attended when every rule switched on allows
// it: causal kv <= q_abs; window kv > q_abs - W; chunk floor((kv - lp) / C) == floor((q_abs - lp) /
// C) with lp the leading zeros of padding_mask[b]; padding padding_mask[b, kv] != 0; segment: a new
// segment starts at the first token of a row and wherever position_ids (row 0 of
// [position_id_rows, B, q_len]) does not increase by exactly 1, keys before q_offset[b] belong to
// segment 0 and keys at or after q_offset[b] + q_len to none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/status.h"

namespace deltacheck::kernels::cpu {

struct MaskParams {
  int64_t batch = 1;                      // B
  int64_t q_len = 0;                      // new (query) tokens per row
  int64_t kv_length = 0;                  // key buffer length (max_cache_len for a static cache)
  int64_t q_offset = 0;                   // cache position of query 0, shared by every row ...
  const int64_t* q_offsets = nullptr;     // ... or [B] per row (overrides q_offset)
  bool causal = true;                     // false: bidirectional; window and chunk need causal
  int64_t sliding_window = 0;             // W, 0 = none
  int64_t chunk_size = 0;                 // C, 0 = none
  const uint8_t* padding_mask = nullptr;  // [B, kv_length], nonzero = real token; nullptr: all real
  const int64_t* position_ids = nullptr;  // [position_id_rows, B, q_len]; nullptr: no packing
  int64_t position_id_rows = 1;           // 1, or 3 / 4 for multimodal rotary ids: row 0 decides
  bool static_cache = false;              // masks are always needed
  int num_threads = 0;                    // 0: all hardware threads (used for large masks only)
};

// InvalidArgument naming the inconsistency (sizes, q_offset + q_len > kv_length, ...).
Status validate(const MaskParams& p);

// out: [B, 1, q_len, kv_length], 1 = may attend.
Status build_bool_mask(const MaskParams& p, uint8_t* out);

enum class AdditiveFill { kFloat32Lowest, kBFloat16Lowest, kFloat16Lowest, kNegativeInfinity };

// out: [B, 1, q_len, kv_length] floats, 0 where allowed, the fill value elsewhere.
Status build_additive_mask(const MaskParams& p, AdditiveFill fill, float* out);

// *needed = false only when attention may run without a mask: causal, kv_length < W and < C (when
// set), no padding (absent or all ones), no packing, not a static cache, and q_len == kv_length or
// (q_len == 1 and every q_offset == kv_length - 1).
Status mask_needed(const MaskParams& p, bool* needed);

// out: [B, q_len], 1 where the query has no allowed key at all.
Status fully_masked_rows(const MaskParams& p, uint8_t* out);

// out: [B, q_len], padding_mask[b, q_offset[b] + q] != 0 (all 1 without a padding mask).
Status token_validity(const MaskParams& p, uint8_t* out);

// ---- per layer type -----------------------------------------------------------------------------

enum class LayerMaskKind { kAttention, kValidity, kNone };

struct LayerMask {
  std::string layer_type;
  LayerMaskKind kind = LayerMaskKind::kNone;
  std::vector<uint8_t> mask;  // kAttention: [B, 1, q_len, kv_length]; kValidity: [B, q_len]
  bool needed = false;        // kAttention: mask_needed() for the layer's parameters
};

struct LayerMasks {
  std::vector<LayerMask> masks;        // one per distinct layer type, in order of first appearance
  std::vector<int64_t> layer_to_mask;  // per layer: index into masks
};

// full_attention: causal; sliding_attention: causal + p.sliding_window; chunked_attention: causal +
// p.chunk_size (window and chunk size apply only to their own type; p.causal is ignored);
// linear_attention: token validity, or kNone when every new token is valid or when decoding one
// token (q_len == 1 and every q_offset > 0). A type with no rule: InvalidArgument
// "unknown layer type 'xyz' at layer 3"; nothing is built then.
Status layer_masks(const std::vector<std::string>& layer_types, const MaskParams& p,
                   LayerMasks* out);

// ---- sequence boundaries for the linear layers --------------------------------------------------

// out: [cu_seqlens[num_seqs]], token t of [cu[i], cu[i+1]) gets i (zero-length sequences keep
// their number). cu_seqlens: [num_seqs + 1], starting at 0, non-decreasing.
Status sequence_index_from_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, int64_t* out);

struct PackedSegments {
  std::vector<int64_t> cu_seqlens;  // [N + 1] over the batch * len flattened tokens
  int64_t max_seqlen = 0;
  std::vector<int64_t> sequence_index;  // per flattened token
};

// position_ids [batch, len], flattened: a sequence starts at every row start and wherever the
// position does not increase by exactly 1.
Status segments_from_position_ids(const int64_t* position_ids, int64_t batch, int64_t len,
                                  PackedSegments* out);

struct Unpadded {
  std::vector<int64_t> indices;     // flattened b * len + t of every real token
  std::vector<int64_t> cu_seqlens;  // [batch + 1]
  int64_t max_seqlen = 0;
};

// Unpadding of a 2-D padding mask [batch, len] (nonzero = real).
Status unpad(const uint8_t* padding_mask, int64_t batch, int64_t len, Unpadded* out);

}  // namespace deltacheck::kernels::cpu
