// The reference's side of the decisions in docs/mask-semantics.md, where Transformers' masking
// utilities answer differently and docs/semantics.md says the reference is right. The peer suite
// (scripts/peers-check.sh) pins Transformers' side of the same cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/mask.h"

namespace deltacheck::reference {
namespace {

// 1. A static-cache prefill without padding: Transformers returns no mask (SDPA is_causal);
//    docs/semantics.md: "never [skip] for a static cache, whose masks are always built".
TEST(MaskSemantics, StaticCachePrefillAlwaysNeedsAMask) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 24;
  s.kv_length = 64;
  s.static_cache = true;
  EXPECT_TRUE(mask_needed(s));
  s.static_cache = false;  // the same shape without a static cache still needs one (kv > q)
  EXPECT_TRUE(mask_needed(s));
  s.kv_length = 24;  // and a square dynamic prefill may skip: the rule is specific to static
  EXPECT_FALSE(mask_needed(s));
  s.static_cache = true;
  s.kv_length = 25;
  EXPECT_TRUE(mask_needed(s));
}

// 2. Bidirectional without padding: Transformers skips it; docs/semantics.md skips pure causal
// masks only.
TEST(MaskSemantics, BidirectionalMaskIsNeededWithoutPadding) {
  MaskSpec s;
  s.q_len = 24;
  s.kv_length = 24;
  s.causal = false;
  EXPECT_TRUE(mask_needed(s));
  s.causal = true;
  EXPECT_FALSE(mask_needed(s));
}

// 3. Chunked prefill whose new tokens are all real while the cached prefix holds left padding:
//    Transformers returns an all-ones validity mask for linear_attention; docs/semantics.md gives
//    the mask "for the new tokens, or none when every token is valid".
TEST(MaskSemantics, LinearLayerGetsNoMaskWhenEveryNewTokenIsValid) {
  MaskSpec s;
  s.batch = 2;
  s.q_len = 16;
  s.q_offset = {24};
  s.kv_length = 40;
  s.padding_mask.assign(2 * 40, 1);
  for (int64_t j = 0; j < 5; ++j) s.padding_mask[static_cast<size_t>(j)] = 0;  // row 0: 5 pads
  const LayerMasks lm = layer_masks({"linear_attention", "full_attention"}, s);
  ASSERT_EQ(lm.masks.size(), 2u);
  EXPECT_EQ(lm.masks[0].layer_type, "linear_attention");
  EXPECT_EQ(lm.masks[0].kind, LayerMaskKind::kNone);
  EXPECT_FALSE(lm.masks[0].needed);
  // A padded new token turns it into a validity mask (the rule can also answer "validity").
  s.padding_mask[static_cast<size_t>(24 + 3)] = 0;
  const LayerMasks padded = layer_masks({"linear_attention"}, s);
  EXPECT_EQ(padded.masks[0].kind, LayerMaskKind::kValidity);
  EXPECT_EQ(padded.masks[0].mask.at(3), 0);
  EXPECT_EQ(padded.masks[0].mask.at(4), 1);
}

}  // namespace
}  // namespace deltacheck::reference
