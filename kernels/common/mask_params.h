// The mask builders' contract, shared by every kernel family (kernels/cpu/mask_builder.h,
// kernels/torch/mask_builder.h, kernels/cuda/mask.h): the parameter and result types, and the
// semantics every builder implements (docs/semantics.md, "Masks"; the reference, reference/mask.h,
// keeps its own types and judges the builders bit for bit).
//
// Query q of batch row b sits at q_abs = q_offset[b] + q; key kv may be attended when every rule
// switched on allows it:
//   causal   kv <= q_abs
//   window   kv >  q_abs - W                                    (W = sliding_window > 0)
//   chunk    floor((kv - lp) / C) == floor((q_abs - lp) / C)    (C = chunk_size > 0, lp = the
//            leading zeros of padding_mask[b]: chunks count from the first real token)
//   padding  padding_mask[b, kv] != 0
//   segment  a new segment starts at the first token of a row and wherever position_ids (row 0 of
//            [position_id_rows, B, q_len]) does not increase by exactly 1; keys before q_offset[b]
//            belong to segment 0 (the cached prefix), keys at or after q_offset[b] + q_len to none.
// Pointers are where the family's buffers live: host memory for the CPU and LibTorch builders,
// device memory for the CUDA one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltacheck::kernels {

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
  bool static_cache = false;              // masks are always needed (no effect on the values)
  int num_threads = 0;  // CPU builder: 0 = all hardware threads (large masks only); others ignore
};

// The fill of the additive form: 0 where allowed, this value elsewhere.
enum class AdditiveFill { kFloat32Lowest, kBFloat16Lowest, kFloat16Lowest, kNegativeInfinity };

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

// ---- sequence boundaries for the linear layers --------------------------------------------------

struct PackedSegments {
  std::vector<int64_t> cu_seqlens;  // [N + 1] over the batch * len flattened tokens
  int64_t max_seqlen = 0;
  std::vector<int64_t> sequence_index;  // per flattened token
};

struct Unpadded {
  std::vector<int64_t> indices;     // flattened b * len + t of every real token
  std::vector<int64_t> cu_seqlens;  // [batch + 1]
  int64_t max_seqlen = 0;
};

}  // namespace deltacheck::kernels

// The functions every host builder (kernels::cpu, kernels::torch) declares in its own namespace,
// with these meanings (the CUDA builder has build_bool_mask and segments_from_position_ids):
//   validate(p)                       InvalidArgument naming the inconsistency (sizes,
//                                     q_offset + q_len > kv_length, ...)
//   build_bool_mask(p, out)           out [B, 1, q_len, kv_length], 1 = may attend
//   build_additive_mask(p, fill, out) out [B, 1, q_len, kv_length] floats, 0 where allowed
//   mask_needed(p, &needed)           needed = false only when attention may run without a mask:
//                                     causal, kv_length < W and < C (when set), no padding (absent
//                                     or all ones), no packing, not a static cache, and q_len ==
//                                     kv_length or (q_len == 1 and every q_offset == kv_length - 1)
//   fully_masked_rows(p, out)         out [B, q_len], 1 where the query has no allowed key at all
//   token_validity(p, out)            out [B, q_len], padding_mask[b, q_offset[b] + q] != 0 (all 1
//                                     without a padding mask)
//   layer_masks(types, p, out)        full_attention: causal; sliding_attention: causal +
//                                     p.sliding_window; chunked_attention: causal + p.chunk_size
//                                     (window and chunk size apply only to their own type; p.causal
//                                     is ignored); linear_attention (also named
//                                     linear_attention_mamba, _mamba2, _gated_delta_net since
//                                     Transformers PR #46738): token validity, or kNone when
//                                     every new token is valid or when decoding one token (q_len ==
//                                     1 and every q_offset > 0). A type with no rule:
//                                     InvalidArgument "unknown layer type 'xyz' at layer 3";
//                                     nothing is built then.
//   sequence_index_from_cu_seqlens(cu, n, out)
//                                     out [cu[n]], token t of [cu[i], cu[i+1]) gets i (zero-length
//                                     sequences keep their number); cu [n + 1], from 0,
//                                     non-decreasing
//   segments_from_position_ids(pos, batch, len, out)
//                                     position_ids [batch, len] flattened: a sequence starts at
//                                     every row start and wherever the position does not increase
//                                     by 1
//   unpad(padding_mask, batch, len, out)   unpadding of a 2-D padding mask (nonzero = real)
