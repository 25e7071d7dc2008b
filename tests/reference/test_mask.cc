// Hand-written masks for every rule of docs/semantics.md "Masks" and their combinations, the
// layer-type mapping (the static-cache KeyError bug) and the segment derivations, checked against
// the reference in reference/mask.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/mask.h"

namespace deltacheck::reference {
namespace {

// A mask [B, 1, q, kv] drawn as text: one line per (b, q) row, '1' = may attend, rows joined by
// '|' and batch rows by " / ", so an expected mask reads like the picture in the docs.
std::string draw(const std::vector<uint8_t>& mask, const MaskSpec& spec) {
  std::string s;
  for (int64_t b = 0; b < spec.batch; ++b) {
    if (b > 0) s += " / ";
    for (int64_t q = 0; q < spec.q_len; ++q) {
      if (q > 0) s += '|';
      for (int64_t kv = 0; kv < spec.kv_length; ++kv) {
        s += mask[static_cast<size_t>((b * spec.q_len + q) * spec.kv_length + kv)] ? '1' : '0';
      }
    }
  }
  return s;
}

std::string draw_mask(const MaskSpec& spec) { return draw(build_bool_mask(spec), spec); }

MaskSpec square(int64_t n) {
  MaskSpec s;
  s.q_len = n;
  s.kv_length = n;
  return s;
}

TEST(Mask, CausalSquare) { EXPECT_EQ(draw_mask(square(4)), "1000|1100|1110|1111"); }

TEST(Mask, CausalWithCacheOffset) {
  MaskSpec s;
  s.q_len = 2;
  s.kv_length = 5;
  s.q_offset = {3};
  EXPECT_EQ(draw_mask(s), "11110|11111");
}

TEST(Mask, PerRowCacheOffsets) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 1;
  s.kv_length = 4;
  s.q_offset = {1, 3};
  EXPECT_EQ(draw_mask(s), "1100 / 1111");
}

TEST(Mask, Bidirectional) {
  MaskSpec s = square(3);
  s.causal = false;
  EXPECT_EQ(draw_mask(s), "111|111|111");
}

TEST(Mask, SlidingWindow) {
  MaskSpec s = square(5);
  s.sliding_window = 3;
  // Transformers' sdpa_mask docstring example for sliding_window=3.
  EXPECT_EQ(draw_mask(s), "10000|11000|11100|01110|00111");
}

TEST(Mask, SlidingWindowWithOffset) {
  MaskSpec s;
  s.q_len = 2;
  s.kv_length = 6;
  s.q_offset = {4};
  s.sliding_window = 2;
  EXPECT_EQ(draw_mask(s), "000110|000011");
}

TEST(Mask, Chunked) {
  MaskSpec s = square(5);
  s.chunk_size = 3;
  // Transformers' sdpa_mask docstring example for chunk_size=3.
  EXPECT_EQ(draw_mask(s), "10000|11000|11100|00010|00011");
}

TEST(Mask, ChunksCountFromFirstRealToken) {
  MaskSpec s = square(5);
  s.chunk_size = 2;
  s.padding_mask = {0, 1, 1, 1, 1};
  // One left-padding token: chunks are {1, 2} and {3, 4}, not {0, 1}, {2, 3}, {4}.
  EXPECT_EQ(draw_mask(s), "00000|01000|01100|00010|00011");
  EXPECT_EQ(left_padding(s, 0), 1);
  // Without the padding mask the chunks are counted from slot 0.
  s.padding_mask.clear();
  EXPECT_EQ(draw_mask(s), "10000|11000|00100|00110|00001");
}

TEST(Mask, ChunkOfLeftPaddingQueryIsFloorDivided) {
  MaskSpec s = square(4);
  s.chunk_size = 2;
  s.padding_mask = {0, 0, 0, 1};  // lp = 3: slots 1, 2 are chunk -1, slot 0 is chunk -2
  const MaskDecision d = explain(s, 0, 2, 0);
  EXPECT_EQ(d.rule, MaskRule::kChunk);
  EXPECT_NE(d.detail.find("in chunk -2"), std::string::npos) << d.detail;
  EXPECT_NE(d.detail.find("in chunk -1"), std::string::npos) << d.detail;
  EXPECT_EQ(explain(s, 0, 2, 1).rule, MaskRule::kPadding);  // same chunk, then padding denies
}

TEST(Mask, PaddingLeftAndRight) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 4;
  s.kv_length = 4;
  s.padding_mask = {0, 0, 1, 1,   // left padded
                    1, 1, 1, 0};  // right padded
  EXPECT_EQ(draw_mask(s), "0000|0000|0010|0011 / 1000|1100|1110|1110");
  const std::vector<uint8_t> expected_fully_masked = {1, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(fully_masked_rows(s), expected_fully_masked);
}

TEST(Mask, PaddingAndWindowAndChunkTogether) {
  MaskSpec s = square(6);
  s.sliding_window = 2;
  s.chunk_size = 3;
  s.padding_mask = {0, 1, 1, 1, 1, 1};  // chunks {1,2,3}, {4,5}
  EXPECT_EQ(draw_mask(s), "000000|010000|011000|001100|000010|000011");
}

TEST(Mask, PackedSegments) {
  MaskSpec s = square(6);
  s.position_ids = {0, 1, 2, 0, 1, 0};  // segments 0 0 0 1 1 2
  EXPECT_EQ(draw_mask(s), "100000|110000|111000|000100|000110|000001");
  const std::vector<int64_t> expected = {0, 0, 0, 1, 1, 2};
  EXPECT_EQ(packed_segment_ids(s), expected);
  EXPECT_TRUE(has_packing(s));
}

TEST(Mask, PackedSegmentsNotStartingAtZero) {
  MaskSpec s = square(5);
  s.position_ids = {7, 8, 9, 3, 4};  // first segment starts at 7, the next restarts at 3
  EXPECT_EQ(draw_mask(s), "10000|11000|11100|00010|00011");
  s.position_ids = {7, 8, 9, 10, 11};  // one segment, whatever its start
  EXPECT_FALSE(has_packing(s));
  EXPECT_EQ(draw_mask(s), "10000|11000|11100|11110|11111");
}

TEST(Mask, PackedLengthOneSegments) {
  MaskSpec s = square(4);
  s.position_ids = {0, 0, 0, 0};
  EXPECT_EQ(draw_mask(s), "1000|0100|0010|0001");
  s.position_ids = {5, 3, 4, 9};  // a repeated or decreasing position also starts a segment
  EXPECT_EQ(draw_mask(s), "1000|0100|0110|0001");
}

TEST(Mask, PackedSegmentsPerBatchRow) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 3;
  s.kv_length = 3;
  s.position_ids = {0, 1, 0,   //
                    4, 5, 6};  // second row is one segment
  EXPECT_EQ(draw_mask(s), "100|110|001 / 100|110|111");
}

TEST(Mask, PackedWithPaddingAndWindow) {
  MaskSpec s = square(6);
  s.sliding_window = 2;
  s.padding_mask = {1, 1, 1, 1, 1, 0};
  s.position_ids = {0, 1, 2, 3, 0, 1};
  EXPECT_EQ(draw_mask(s), "100000|110000|011000|001100|000010|000010");
}

TEST(Mask, PackedWithCacheContinuesFirstSegment) {
  MaskSpec s;
  s.q_len = 3;
  s.kv_length = 5;
  s.q_offset = {2};
  s.position_ids = {2, 3, 0};  // continues the cached prefix, then a new sequence
  EXPECT_EQ(draw_mask(s), "11100|11110|00001");
}

TEST(Mask, StaticCacheSlotsPastWrittenAreCausallyMasked) {
  MaskSpec s;
  s.q_len = 3;
  s.kv_length = 8;  // max_cache_len
  s.q_offset = {2};
  s.static_cache = true;
  EXPECT_EQ(draw_mask(s), "11100000|11110000|11111000");
  EXPECT_TRUE(mask_needed(s));
  // A bidirectional packed mask keeps unwritten slots out: they belong to no segment.
  s.causal = false;
  s.position_ids = {2, 3, 4};
  EXPECT_EQ(draw_mask(s), "11111000|11111000|11111000");
  EXPECT_EQ(explain(s, 0, 0, 6).rule, MaskRule::kSegment);
}

TEST(Mask, StaticCacheDecodeStepIsNeverSkipped) {
  MaskSpec s;
  s.q_len = 1;
  s.kv_length = 4;
  s.q_offset = {3};
  EXPECT_FALSE(mask_needed(s));  // dynamic cache: the last slot sees everything
  s.static_cache = true;
  EXPECT_TRUE(mask_needed(s));
  s.static_cache = false;
  s.kv_length = 6;  // the same decode step in a larger buffer: slots 4, 5 must be masked
  EXPECT_TRUE(mask_needed(s));
  EXPECT_EQ(draw_mask(s), "111100");
}

TEST(Mask, MaskNeededRules) {
  MaskSpec s = square(4);
  EXPECT_FALSE(mask_needed(s));
  s.padding_mask = {1, 1, 1, 1};
  EXPECT_FALSE(mask_needed(s)) << "an all-ones padding mask is no padding";
  s.padding_mask = {0, 1, 1, 1};
  EXPECT_TRUE(mask_needed(s));
  s.padding_mask.clear();
  s.sliding_window = 5;
  EXPECT_FALSE(mask_needed(s)) << "window not reached";
  s.sliding_window = 4;
  EXPECT_TRUE(mask_needed(s)) << "kv_length >= W";
  s.sliding_window = 0;
  s.chunk_size = 5;
  EXPECT_FALSE(mask_needed(s));
  s.chunk_size = 4;
  EXPECT_TRUE(mask_needed(s));
  s.chunk_size = 0;
  s.position_ids = {3, 4, 5, 6};
  EXPECT_FALSE(mask_needed(s)) << "one segment is no packing";
  s.position_ids = {0, 1, 0, 1};
  EXPECT_TRUE(mask_needed(s));
  s.position_ids.clear();
  s.causal = false;
  EXPECT_TRUE(mask_needed(s));
  s.causal = true;
  s.q_offset = {0};
  s.kv_length = 5;
  EXPECT_TRUE(mask_needed(s)) << "q != kv and q != 1";
}

TEST(Mask, AdditiveMaskFillValues) {
  MaskSpec s = square(2);
  const std::vector<float> f32 = build_additive_mask(s, AdditiveFill::kFloat32Lowest);
  ASSERT_EQ(f32.size(), 4u);
  EXPECT_EQ(f32[0], 0.0f);
  EXPECT_FALSE(std::signbit(f32[0]));
  EXPECT_EQ(f32[1], std::numeric_limits<float>::lowest());
  EXPECT_EQ(f32[2], 0.0f);
  EXPECT_EQ(f32[3], 0.0f);

  const std::vector<float> bf16 = build_additive_mask(s, AdditiveFill::kBFloat16Lowest);
  uint32_t bits;
  std::memcpy(&bits, &bf16[1], 4);
  EXPECT_EQ(bits, 0xff7f0000u);
  EXPECT_FLOAT_EQ(bf16[1], -3.3895313892515355e38f);

  EXPECT_EQ(build_additive_mask(s, AdditiveFill::kFloat16Lowest)[1], -65504.0f);
  const float inf = build_additive_mask(s, AdditiveFill::kNegativeInfinity)[1];
  EXPECT_TRUE(std::isinf(inf) && inf < 0);
}

TEST(Mask, ExplainNamesTheFirstDenyingRule) {
  MaskSpec s = square(6);
  s.sliding_window = 3;
  s.padding_mask = {0, 1, 1, 1, 1, 1};
  s.position_ids = {0, 1, 2, 0, 1, 2};
  EXPECT_EQ(explain(s, 0, 1, 2).rule, MaskRule::kCausal);
  EXPECT_EQ(explain(s, 0, 5, 1).rule, MaskRule::kWindow);
  EXPECT_EQ(explain(s, 0, 1, 0).rule, MaskRule::kPadding);
  EXPECT_EQ(explain(s, 0, 4, 2).rule, MaskRule::kSegment);
  const MaskDecision ok = explain(s, 0, 4, 3);
  EXPECT_TRUE(ok.allowed);
  EXPECT_EQ(ok.rule, MaskRule::kAllowed);
  EXPECT_TRUE(allowed(s, 0, 4, 4));
  EXPECT_FALSE(allowed(s, 0, 4, 5));
  EXPECT_STREQ(mask_rule_name(MaskRule::kSegment), "segment");
  EXPECT_EQ(explain(s, 0, 1, 2).detail, "causal: kv 2 > q_abs 1");
  EXPECT_EQ(explain(s, 0, 5, 1).detail, "window: kv 1 <= q_abs 5 - W 3");
  EXPECT_THROW(explain(s, 0, 6, 0), std::invalid_argument);
}

TEST(Mask, ExplainAgreesWithBuiltMask) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 5;
  s.kv_length = 7;
  s.q_offset = {2, 1};
  s.chunk_size = 3;
  s.padding_mask = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  s.position_ids = {2, 3, 0, 1, 2, 1, 2, 3, 0, 1};
  const std::vector<uint8_t> m = build_bool_mask(s);
  size_t i = 0;
  int denied = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t q = 0; q < s.q_len; ++q) {
      for (int64_t kv = 0; kv < s.kv_length; ++kv, ++i) {
        const MaskDecision d = explain(s, b, q, kv);
        EXPECT_EQ(d.allowed, m[i] != 0) << b << " " << q << " " << kv;
        EXPECT_EQ(d.allowed, d.rule == MaskRule::kAllowed);
        denied += d.allowed ? 0 : 1;
      }
    }
  }
  EXPECT_GT(denied, 0);
  EXPECT_LT(denied, static_cast<int>(m.size()));
}

TEST(Mask, MultimodalPositionIdsUseRowZero) {
  MaskSpec s = square(4);
  s.position_id_rows = 3;
  s.position_ids = {0, 1, 0, 1,   // row 0 (temporal / text): two segments
                    0, 1, 2, 3,   // height: would be one segment
                    9, 9, 9, 9};  // width: would be four
  EXPECT_EQ(draw_mask(s), "1000|1100|0010|0011");
  const std::vector<int64_t> expected = {0, 1, 0, 1};
  EXPECT_EQ(text_position_ids(s.position_ids, 3, 1, 4), expected);
  s.position_id_rows = 4;
  s.position_ids.insert(s.position_ids.end(), {0, 0, 0, 0});
  EXPECT_EQ(draw_mask(s), "1000|1100|0010|0011");
}

TEST(Mask, TokenValidityIsThePaddingOfTheNewTokens) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 2;
  s.kv_length = 5;
  s.q_offset = {3, 1};
  s.padding_mask = {1, 1, 1, 0, 1,   // new tokens at slots 3, 4
                    0, 1, 0, 1, 1};  // new tokens at slots 1, 2
  const std::vector<uint8_t> expected = {0, 1, 1, 0};
  EXPECT_EQ(token_validity(s), expected);
}

TEST(Mask, ValidateRejectsInconsistentSpecs) {
  MaskSpec s = square(3);
  s.q_offset = {1};
  EXPECT_THROW(validate(s), std::invalid_argument) << "offset + q_len > kv_length";
  s = square(3);
  s.causal = false;
  s.sliding_window = 2;
  EXPECT_THROW(validate(s), std::invalid_argument);
  s = square(3);
  s.padding_mask = {1, 1};
  EXPECT_THROW(validate(s), std::invalid_argument);
  s = square(3);
  s.position_ids = {0, 1};
  EXPECT_THROW(validate(s), std::invalid_argument);
  s = square(3);
  s.q_offset = {0, 0};
  EXPECT_THROW(validate(s), std::invalid_argument);
  EXPECT_NO_THROW(validate(square(0)));
  EXPECT_TRUE(build_bool_mask(square(0)).empty());
}

// ---- layer types: the static-cache KeyError('linear_attention') bug
// ------------------------------

MaskSpec hybrid_prefill() {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 3;
  s.kv_length = 6;  // static cache, max_cache_len 6
  s.static_cache = true;
  s.sliding_window = 2;
  s.padding_mask = {0, 1, 1, 0, 0, 0,  // left padded, slots 3.. not written yet
                    1, 1, 1, 0, 0, 0};
  return s;
}

TEST(LayerMasks, HybridStaticCacheBuildsEveryType) {
  const MaskSpec s = hybrid_prefill();
  const std::vector<std::string> types = {"linear_attention", "linear_attention",
                                          "sliding_attention", "full_attention",
                                          "linear_attention"};
  const LayerMasks lm = layer_masks(types, s);
  ASSERT_EQ(lm.masks.size(), 3u);
  const std::vector<int64_t> expected_index = {0, 0, 1, 2, 0};
  EXPECT_EQ(lm.layer_to_mask, expected_index);

  const LayerMask& linear = lm.masks[0];
  EXPECT_EQ(linear.layer_type, "linear_attention");
  EXPECT_EQ(linear.kind, LayerMaskKind::kValidity);
  const std::vector<uint8_t> validity = {0, 1, 1, 1, 1, 1};
  EXPECT_EQ(linear.mask, validity);
  EXPECT_FALSE(linear.needed);

  const LayerMask& sliding = lm.masks[1];
  EXPECT_EQ(sliding.kind, LayerMaskKind::kAttention);
  EXPECT_TRUE(sliding.needed);
  EXPECT_EQ(draw(sliding.mask, s), "000000|010000|011000 / 100000|110000|011000");

  const LayerMask& full = lm.masks[2];
  EXPECT_EQ(full.kind, LayerMaskKind::kAttention);
  EXPECT_EQ(draw(full.mask, s), "000000|010000|011000 / 100000|110000|111000");
  EXPECT_STREQ(layer_mask_kind_name(full.kind), "attention");
}

TEST(LayerMasks, UnknownTypeIsANamedError) {
  const MaskSpec s = hybrid_prefill();
  try {
    layer_masks({"linear_attention", "full_attention", "full_attention", "xyz"}, s);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown layer type 'xyz' at layer 3");
  }
}

TEST(LayerMasks, TypeNeedingAMissingParameterIsANamedError) {
  MaskSpec s = hybrid_prefill();
  s.sliding_window = 0;
  try {
    layer_masks({"full_attention", "sliding_attention"}, s);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_attention' at layer 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layer_masks({"chunked_attention"}, s), std::invalid_argument);
}

TEST(LayerMasks, LinearAttentionHasNoMaskWhenEveryTokenIsValid) {
  MaskSpec s = square(4);
  s.padding_mask = {1, 1, 1, 1};
  const LayerMasks lm = layer_masks({"linear_attention", "full_attention"}, s);
  EXPECT_EQ(lm.masks[0].kind, LayerMaskKind::kNone);
  EXPECT_TRUE(lm.masks[0].mask.empty());
  EXPECT_FALSE(lm.masks[1].needed) << "a pure causal prefill may skip the 4-D mask";
  EXPECT_EQ(lm.masks[1].kind, LayerMaskKind::kAttention) << "but it is still built";
}

TEST(LayerMasks, LinearAttentionHasNoMaskWhenDecodingOneToken) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 1;
  s.kv_length = 4;
  s.q_offset = {3};
  s.padding_mask = {0, 1, 1, 1, 1, 1, 1, 0};  // row 1's new token is padding
  EXPECT_EQ(layer_masks({"linear_attention"}, s).masks[0].kind, LayerMaskKind::kNone);
  s.q_offset = {0};  // a one-token prefill is not a decode step
  s.padding_mask = {0, 1, 1, 1, 1, 1, 1, 1};
  const LayerMask m = layer_masks({"linear_attention"}, s).masks[0];
  EXPECT_EQ(m.kind, LayerMaskKind::kValidity);
  const std::vector<uint8_t> expected = {0, 1};
  EXPECT_EQ(m.mask, expected);
}

TEST(LayerMasks, ChunkedLayerUsesChunkSizeOnly) {
  MaskSpec s = square(5);
  s.chunk_size = 3;
  s.sliding_window = 2;
  const LayerMasks lm = layer_masks({"chunked_attention"}, s);
  EXPECT_EQ(draw(lm.masks[0].mask, s), "10000|11000|11100|00010|00011");
}

// ---- segment derivation
// ---------------------------------------------------------------------------

TEST(Segments, FromCuSeqlensKeepsZeroLengthNumbers) {
  const std::vector<int64_t> expected = {1, 1, 3, 5, 5, 5};
  EXPECT_EQ(sequence_index_from_cu_seqlens({0, 0, 2, 2, 3, 3, 6, 6}), expected);
  EXPECT_TRUE(sequence_index_from_cu_seqlens({0}).empty());
  EXPECT_THROW(sequence_index_from_cu_seqlens({1, 2}), std::invalid_argument);
  EXPECT_THROW(sequence_index_from_cu_seqlens({0, 3, 2}), std::invalid_argument);
}

TEST(Segments, FromPositionIds) {
  // 4 5 6 | 0 | 0 1 2 | 9: not starting at 0, a length-1 sequence, a jump that is not a restart.
  const PackedSegments p = segments_from_position_ids({4, 5, 6, 0, 0, 1, 2, 9}, 1, 8);
  const std::vector<int64_t> cu = {0, 3, 4, 7, 8};
  const std::vector<int64_t> index = {0, 0, 0, 1, 2, 2, 2, 3};
  EXPECT_EQ(p.cu_seqlens, cu);
  EXPECT_EQ(p.sequence_index, index);
  EXPECT_EQ(p.max_seqlen, 3);
}

TEST(Segments, FromPositionIdsBatchIsFlattened) {
  // Row 1 continues row 0's positions (3 after 2) but still starts its own sequence.
  const PackedSegments p = segments_from_position_ids({0, 1, 2, 3, 4, 0}, 2, 3);
  const std::vector<int64_t> cu = {0, 3, 5, 6};
  const std::vector<int64_t> index = {0, 0, 0, 1, 1, 2};
  EXPECT_EQ(p.cu_seqlens, cu);
  EXPECT_EQ(p.sequence_index, index);
  EXPECT_EQ(p.max_seqlen, 3);
  const PackedSegments empty = segments_from_position_ids({}, 0, 5);
  EXPECT_EQ(empty.cu_seqlens, std::vector<int64_t>{0});
  EXPECT_EQ(empty.max_seqlen, 0);
}

TEST(Segments, Unpad) {
  const Unpadded u = unpad({0, 1, 1, 1, 1, 0, 0, 0, 0}, 3, 3);
  const std::vector<int64_t> indices = {1, 2, 3, 4};
  const std::vector<int64_t> cu = {0, 2, 4, 4};
  EXPECT_EQ(u.indices, indices);
  EXPECT_EQ(u.cu_seqlens, cu);
  EXPECT_EQ(u.max_seqlen, 2);
  EXPECT_THROW(unpad({1, 1}, 1, 3), std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::reference
