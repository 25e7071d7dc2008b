// Attention-mask construction, exactly as docs/semantics.md ("Masks") defines it: the oracle the
// mask builders are compared to bit for bit.
//
// Every function here is written straight from the definition, one element at a time, so a reader
// can check it against the text; nothing is shared with the builders under test.
//
// allowed(b, q, kv) is the AND of the rules that are switched on, checked in this order (the first
// that denies is the one explain() reports):
//   causal   kv <= q_abs                                  (q_abs = q_offset[b] + q)
//   window   kv >  q_abs - W                              (W = sliding_window > 0)
//   chunk    floor((kv - lp) / C) == floor((q_abs - lp) / C)   (C = chunk_size > 0; lp = number
//            of leading zeros in padding_mask[b], so chunks are counted from the first real token)
//   padding  padding_mask[b, kv] != 0
//   segment  segment(b, kv) == segment(b, q)   (only when position_ids are given)
//
// Packed segments: along each batch row of position_ids a new segment starts at the first token and
// wherever the position does not increase by exactly 1 (Transformers'
// find_packed_sequence_indices). Keys are mapped onto segments by where they sit in the key buffer:
//   kv <  q_offset[b]                      segment 0: the cached prefix is continued by the first
//                                          new token, never restarted;
//   q_offset[b] <= kv < q_offset[b]+q_len  the segment of new token kv - q_offset[b];
//   kv >= q_offset[b] + q_len              segment -1 (unwritten static-cache slots: in no
//   segment).
// Transformers only looks for packing without a cache and without a 2-D mask; the reference
// defines every combination and the harness records which ones a framework is expected to support.
//
// Multimodal rotary position ids come as [3, B, q] (temporal, height, width) or [4, B, q] (text row
// first, then the three rotary rows). In both layouts row 0 decides packing, as Transformers passes
// `position_ids[0]` to its mask functions. For the three-row layout row 0 is the temporal row:
// vision tokens that share a temporal position therefore start new segments there too, exactly as
// in Transformers; a caller that wants images kept whole passes the four-row layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltacheck::reference {

struct MaskSpec {
  int64_t batch = 1;      // B
  int64_t q_len = 0;      // new (query) tokens per batch row
  int64_t kv_length = 0;  // key buffer length; with a static cache, max_cache_len
  // Cache position of query 0: empty (0 for every row), one value shared by all rows, or one per
  // row. Every row must satisfy q_offset + q_len <= kv_length (the keys include the new tokens).
  std::vector<int64_t> q_offset;
  bool causal = true;                 // false: bidirectional (only padding and segments apply)
  int64_t sliding_window = 0;         // W, 0 = none; requires causal
  int64_t chunk_size = 0;             // C, 0 = none; requires causal
  std::vector<uint8_t> padding_mask;  // [B, kv_length], nonzero = real token; empty: all real
  std::vector<int64_t> position_ids;  // [position_id_rows, B, q_len]; empty: no packing
  int64_t position_id_rows = 1;       // 1, or 3 / 4 for multimodal rotary ids (row 0 decides)
  bool static_cache = false;          // pre-allocated cache: masks are always built
};

// Throws std::invalid_argument naming the inconsistency.
void validate(const MaskSpec& spec);

// Cache position of query q of batch row b: q_offset[b] + q.
int64_t query_position(const MaskSpec& spec, int64_t b, int64_t q);

// Leading zeros of padding_mask[b] (kv_length for an all-padding row, 0 without a padding mask).
int64_t left_padding(const MaskSpec& spec, int64_t b);

// Per-row segment index of each new token, [B, q_len]; all zeros without position_ids.
std::vector<int64_t> packed_segment_ids(const MaskSpec& spec);

// True when position_ids are given and some row holds more than one segment.
bool has_packing(const MaskSpec& spec);

// Which rule denied a (query, key) pair; kAllowed when none did.
enum class MaskRule { kAllowed, kCausal, kWindow, kChunk, kPadding, kSegment };
const char* mask_rule_name(MaskRule rule);  // "allowed", "causal", "window", "chunk", ...

struct MaskDecision {
  bool allowed = false;
  MaskRule rule = MaskRule::kAllowed;  // the first rule (in the order above) that denied the pair
  std::string detail;                  // the numbers behind the decision, one line
};

// One element; for diagnostics (cost O(q_len + kv_length)).
bool allowed(const MaskSpec& spec, int64_t b, int64_t q, int64_t kv);
MaskDecision explain(const MaskSpec& spec, int64_t b, int64_t q, int64_t kv);

// Boolean mask [B, 1, q_len, kv_length], 1 = may attend.
std::vector<uint8_t> build_bool_mask(const MaskSpec& spec);

// What the additive mask holds where attention is not allowed.
enum class AdditiveFill {
  kFloat32Lowest,   // -3.40282347e38, torch.finfo(float32).min
  kBFloat16Lowest,  // -3.38953139e38, torch.finfo(bfloat16).min, exact in fp32
  kFloat16Lowest,   // -65504
  kNegativeInfinity,
};
float additive_fill_value(AdditiveFill fill);

// Additive float mask [B, 1, q_len, kv_length]: 0 where allowed, the fill value elsewhere.
std::vector<float> build_additive_mask(const MaskSpec& spec, AdditiveFill fill);

// False only when attention may run without a mask ("skip", SDPA's is_causal path): causal, no
// window or chunk reached (kv_length < W, kv_length < C), no padding (absent or all ones), no
// packing, not a static cache, and the implicit mask equals the real one:
//   q_len == kv_length (so every q_offset is 0: the top-left causal triangle), or
//   q_len == 1 with q_offset == kv_length - 1 for every row (one query that sees every key).
// The rules are Transformers' _ignore_causal_mask_sdpa; the q_offset condition is ours and makes
// explicit why a static cache (kv_length = max_cache_len) can never skip.
bool mask_needed(const MaskSpec& spec);

// [B, q_len], 1 where the query row has no allowed key at all (e.g. a left-padding query).
std::vector<uint8_t> fully_masked_rows(const MaskSpec& spec);

// [B, q_len], validity of the new tokens: padding_mask[b, q_offset[b] + q] != 0 (all 1 without a
// padding mask).
std::vector<uint8_t> token_validity(const MaskSpec& spec);

// ---- Per-layer-type masks, as a hybrid model pre-builds them (e.g. for a static cache) ----------

enum class LayerMaskKind {
  kAttention,  // 4-D boolean mask [B, 1, q_len, kv_length]
  kValidity,   // 2-D token validity of the new tokens [B, q_len] (linear_attention)
  kNone,       // no mask: every new token is valid, or one token is being decoded
};
const char* layer_mask_kind_name(LayerMaskKind kind);  // "attention", "validity", "none"

struct LayerMask {
  std::string layer_type;
  LayerMaskKind kind = LayerMaskKind::kNone;
  std::vector<uint8_t> mask;  // layout per kind; empty for kNone
  bool needed = false;        // kAttention: mask_needed() of the layer's spec; otherwise false
};

struct LayerMasks {
  std::vector<LayerMask> masks;        // one per distinct layer type, in order of first appearance
  std::vector<int64_t> layer_to_mask;  // per layer: index into masks
};

// linear_attention, and the per-backbone names Transformers PR #46738 gave it
// (linear_attention_mamba, linear_attention_mamba2, linear_attention_gated_delta_net): layer types
// with the linear_attention rule below.
bool is_linear_attention_type(const std::string& layer_type);

// Maps each entry of layer_types to its mask:
//   full_attention     causal (+ padding, segments)
//   sliding_attention  causal + window spec.sliding_window (must be > 0)
//   chunked_attention  causal + chunks of spec.chunk_size (must be > 0)
//   linear_attention   token_validity(), or kNone when every new token is valid or when decoding
//   (and its renamed    one token (q_len == 1 and every q_offset > 0)
//   forms, above)
// (Transformers' _update_linear_attn_mask drops the mask whenever the cache already holds state,
// whatever q_len; docs/semantics.md narrows "none" to a one-token decode, so a chunked-prefill call
// with padding among its new tokens keeps its validity mask.) spec.sliding_window and
// spec.chunk_size are the model config's values and apply only to their own layer type; spec.causal
// is ignored (attention layers of a decoder are causal). All attention layers share spec.kv_length.
// Throws std::invalid_argument("unknown layer type 'xyz' at layer 3") for a type with no rule, and
// names the layer when its type needs a window or chunk size the spec does not give.
LayerMasks layer_masks(const std::vector<std::string>& layer_types, const MaskSpec& spec);

// ---- Sequence boundaries for the linear layers -----------------------------------------------

// Per-token sequence index for cu_seqlens [N + 1] (starts at 0, non-decreasing): token t of
// [cu[i], cu[i+1]) gets i, so zero-length sequences keep their number. Length cu_seqlens.back().
std::vector<int64_t> sequence_index_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens);

struct PackedSegments {
  std::vector<int64_t> cu_seqlens;  // [N + 1] over the flattened tokens
  int64_t max_seqlen = 0;
  std::vector<int64_t> sequence_index;  // per flattened token
};

// position_ids [batch, len] flattened to batch * len tokens, as Transformers does for padding-free
// varlen batches. A sequence starts at every row start and wherever the position does not increase
// by exactly 1 (so positions need not start at 0, and a sequence never spans two rows).
PackedSegments segments_from_position_ids(const std::vector<int64_t>& position_ids, int64_t batch,
                                          int64_t len);

struct Unpadded {
  std::vector<int64_t> indices;     // flattened b * len + t of every real token, in order
  std::vector<int64_t> cu_seqlens;  // [batch + 1], row b holds cu[b+1] - cu[b] real tokens
  int64_t max_seqlen = 0;
};

// Unpadding of a 2-D padding mask [batch, len] (nonzero = real), as flash-attention varlen does it.
Unpadded unpad(const std::vector<uint8_t>& padding_mask, int64_t batch, int64_t len);

// Row 0 of position ids laid out [rows, batch, len] (rows 1, 3 or 4): the row that decides packing.
std::vector<int64_t> text_position_ids(const std::vector<int64_t>& position_ids, int64_t rows,
                                       int64_t batch, int64_t len);

}  // namespace deltacheck::reference
