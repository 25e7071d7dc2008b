// One testbed for every host mask builder (kernels/common/mask_params.h): the builder against the
// reference, bit for bit, over a sweep of seeded random specs (every rule and combination, static
// caches, per-row offsets, multimodal position ids), a 2k x 2k mask (the CPU builder's threaded
// path), the per-layer-type masks and the segment derivations. A builder's test file names its
// functions with DELTACHECK_MASK_BUILDER_API (kernels/common/mask_builder_api.h), adds the number
// of random specs to sweep and instantiates the suite:
//
//   DELTACHECK_MASK_BUILDER_API(CpuApi, kernels::cpu);
//   struct CpuBuilder : CpuApi { static constexpr int kSweep = 600; };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Cpu, MaskBuilderTest, CpuBuilder);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/common/mask_params.h"
#include "reference/mask.h"
#include "tests/splitmix64.h"

namespace deltacheck::testbed {

namespace ref = reference;

// Integers from splitmix64 (tests/splitmix64.h), so every run draws the same specs.
struct Rng {
  test_support::SplitMix64 gen;
  uint64_t next() { return gen.next(); }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool coin(int percent) { return uniform(0, 99) < percent; }
};

// Position ids for one row of n tokens: runs that continue (+1) or restart somewhere else, with
// single-token segments and starts that are not 0.
inline void append_position_row(Rng& rng, int64_t n, std::vector<int64_t>* out) {
  int64_t pos = rng.uniform(0, 5);
  for (int64_t i = 0; i < n; ++i) {
    out->push_back(pos);
    pos = rng.coin(20) ? rng.uniform(0, 4) : pos + 1;
  }
}

inline ref::MaskSpec random_spec(Rng& rng, int64_t max_len) {
  ref::MaskSpec s;
  s.batch = rng.uniform(1, 3);
  s.q_len = rng.coin(15) ? 1 : rng.uniform(0, max_len);
  const int64_t max_offset = rng.coin(50) ? 0 : rng.uniform(0, max_len);
  if (rng.coin(50)) {
    s.q_offset = {rng.uniform(0, max_offset)};
  } else {
    for (int64_t b = 0; b < s.batch; ++b) s.q_offset.push_back(rng.uniform(0, max_offset));
  }
  int64_t need = 0;
  for (int64_t o : s.q_offset) need = std::max(need, o + s.q_len);
  s.static_cache = rng.coin(30);
  s.kv_length = need + (s.static_cache || rng.coin(20) ? rng.uniform(0, max_len) : 0);
  s.causal = !rng.coin(15);
  if (s.causal && rng.coin(40)) s.sliding_window = rng.uniform(1, s.kv_length + 2);
  if (s.causal && rng.coin(40)) s.chunk_size = rng.uniform(1, s.kv_length + 2);
  const int64_t padding = rng.uniform(0, 5);  // none, left, right, random, all ones, one empty row
  if (padding > 0) {
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t cut = rng.uniform(0, s.kv_length);
      for (int64_t kv = 0; kv < s.kv_length; ++kv) {
        uint8_t real = 1;
        if (padding == 1) real = kv >= cut;
        if (padding == 2) real = kv < cut;
        if (padding == 3) real = rng.coin(70) ? static_cast<uint8_t>(rng.uniform(1, 3)) : 0;
        if (padding == 5 && b == 0) real = 0;
        s.padding_mask.push_back(real);
      }
    }
  }
  if (rng.coin(45)) {
    s.position_id_rows = rng.coin(70) ? 1 : rng.uniform(3, 4);
    for (int64_t r = 0; r < s.position_id_rows; ++r) {
      for (int64_t b = 0; b < s.batch; ++b) append_position_row(rng, s.q_len, &s.position_ids);
    }
  }
  return s;
}

inline std::string describe(const ref::MaskSpec& s) {
  std::ostringstream o;
  o << "B=" << s.batch << " q=" << s.q_len << " kv=" << s.kv_length << " offsets=[";
  for (int64_t v : s.q_offset) o << v << ",";
  o << "] causal=" << s.causal << " W=" << s.sliding_window << " C=" << s.chunk_size
    << " padding=" << !s.padding_mask.empty()
    << " position_rows=" << (s.position_ids.empty() ? 0 : s.position_id_rows)
    << " static=" << s.static_cache;
  return o.str();
}

// The builder's view of a reference spec; the vectors stay owned by the spec.
inline kernels::MaskParams to_params(const ref::MaskSpec& s, int threads = 1) {
  kernels::MaskParams p;
  p.batch = s.batch;
  p.q_len = s.q_len;
  p.kv_length = s.kv_length;
  if (s.q_offset.size() == 1) p.q_offset = s.q_offset[0];
  if (s.q_offset.size() > 1) p.q_offsets = s.q_offset.data();
  p.causal = s.causal;
  p.sliding_window = s.sliding_window;
  p.chunk_size = s.chunk_size;
  p.padding_mask = s.padding_mask.empty() ? nullptr : s.padding_mask.data();
  p.position_ids = s.position_ids.empty() ? nullptr : s.position_ids.data();
  p.position_id_rows = s.position_id_rows;
  p.static_cache = s.static_cache;
  p.num_threads = threads;
  return p;
}

// Empty when equal; otherwise the first differing (batch, query, key) and why the reference
// decided as it did.
inline std::string first_difference(const ref::MaskSpec& s, const std::vector<uint8_t>& expected,
                                    const std::vector<uint8_t>& actual) {
  if (expected.size() != actual.size()) return "size differs";
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == actual[i]) continue;
    const int64_t kv = static_cast<int64_t>(i) % s.kv_length;
    const int64_t q = (static_cast<int64_t>(i) / s.kv_length) % s.q_len;
    const int64_t b = static_cast<int64_t>(i) / (s.kv_length * s.q_len);
    return "first difference at (b " + std::to_string(b) + ", q " + std::to_string(q) + ", kv " +
           std::to_string(kv) + "): reference " + std::to_string(expected[i]) + ", builder " +
           std::to_string(actual[i]) + "; " + ref::explain(s, b, q, kv).detail;
  }
  return "";
}

template <typename Builder>
void expect_same_masks(const ref::MaskSpec& s, int threads) {
  SCOPED_TRACE(describe(s));
  const kernels::MaskParams p = to_params(s, threads);
  const size_t n = static_cast<size_t>(s.batch * s.q_len * s.kv_length);

  std::vector<uint8_t> mask(n, 7);  // poisoned: an unwritten element shows up as 7
  ASSERT_TRUE(Builder::build_bool_mask(p, mask.data()).ok());
  EXPECT_EQ(first_difference(s, ref::build_bool_mask(s), mask), "");

  const ref::AdditiveFill ref_fills[] = {
      ref::AdditiveFill::kFloat32Lowest, ref::AdditiveFill::kBFloat16Lowest,
      ref::AdditiveFill::kFloat16Lowest, ref::AdditiveFill::kNegativeInfinity};
  const kernels::AdditiveFill fills[] = {
      kernels::AdditiveFill::kFloat32Lowest, kernels::AdditiveFill::kBFloat16Lowest,
      kernels::AdditiveFill::kFloat16Lowest, kernels::AdditiveFill::kNegativeInfinity};
  for (int f = 0; f < 4; ++f) {
    const std::vector<float> expected = ref::build_additive_mask(s, ref_fills[f]);
    std::vector<float> actual(n, 1.0f);
    ASSERT_TRUE(Builder::build_additive_mask(p, fills[f], actual.data()).ok());
    EXPECT_TRUE(n == 0 || std::memcmp(expected.data(), actual.data(), n * sizeof(float)) == 0)
        << "fill " << f;
  }

  bool needed = false;
  ASSERT_TRUE(Builder::mask_needed(p, &needed).ok());
  EXPECT_EQ(needed, ref::mask_needed(s));

  std::vector<uint8_t> rows(static_cast<size_t>(s.batch * s.q_len), 7);
  ASSERT_TRUE(Builder::fully_masked_rows(p, rows.data()).ok());
  EXPECT_EQ(rows, ref::fully_masked_rows(s));

  std::vector<uint8_t> valid(static_cast<size_t>(s.batch * s.q_len), 7);
  ASSERT_TRUE(Builder::token_validity(p, valid.data()).ok());
  EXPECT_EQ(valid, ref::token_validity(s));
}

template <typename Builder>
class MaskBuilderTest : public ::testing::Test {};
TYPED_TEST_SUITE_P(MaskBuilderTest);

TYPED_TEST_P(MaskBuilderTest, RandomSpecsMatchReferenceBitExactly) {
  Rng rng{20240611};
  int with_denied = 0, with_allowed = 0, fully_masked = 0, skippable = 0;
  for (int i = 0; i < TypeParam::kSweep; ++i) {
    const ref::MaskSpec s = random_spec(rng, i < TypeParam::kSweep * 5 / 6 ? 12 : 70);
    expect_same_masks<TypeParam>(s, /*threads=*/i % 2 ? 2 : 1);
    const std::vector<uint8_t> m = ref::build_bool_mask(s);
    for (uint8_t v : m) (v ? with_allowed : with_denied) += 1;
    for (uint8_t v : ref::fully_masked_rows(s)) fully_masked += v;
    skippable += ref::mask_needed(s) ? 0 : 1;
    if (::testing::Test::HasFailure()) break;
  }
  // The sweep must exercise both outcomes of every check, or it proves nothing.
  EXPECT_GT(with_denied, 1000);
  EXPECT_GT(with_allowed, 1000);
  EXPECT_GT(fully_masked, 10);
  EXPECT_GT(skippable, 5);
}

TYPED_TEST_P(MaskBuilderTest, LargeMask) {
  ref::MaskSpec s;
  s.batch = 1;
  s.q_len = 2048;
  s.kv_length = 2048;
  s.sliding_window = 700;
  s.chunk_size = 512;
  for (int64_t kv = 0; kv < s.kv_length; ++kv) s.padding_mask.push_back(kv >= 3 && kv != 1500);
  Rng rng{7};
  append_position_row(rng, s.q_len, &s.position_ids);
  expect_same_masks<TypeParam>(s, /*threads=*/4);
  s.sliding_window = 0;
  s.chunk_size = 0;
  s.position_ids.clear();
  expect_same_masks<TypeParam>(s, /*threads=*/0);
}

TYPED_TEST_P(MaskBuilderTest, LayerMasksMatchReference) {
  Rng rng{99};
  const std::vector<std::string> kinds = {"linear_attention", "full_attention", "sliding_attention",
                                          "chunked_attention"};
  for (int i = 0; i < 200; ++i) {
    ref::MaskSpec s = random_spec(rng, 10);
    s.causal = true;
    if (rng.coin(80)) s.sliding_window = rng.uniform(1, 8);
    if (rng.coin(80)) s.chunk_size = rng.uniform(1, 8);
    std::vector<std::string> types;
    const int64_t layers = rng.uniform(1, 8);
    for (int64_t l = 0; l < layers; ++l) {
      types.push_back(kinds[static_cast<size_t>(rng.uniform(0, 3))]);
    }
    SCOPED_TRACE(describe(s));
    kernels::LayerMasks actual;
    const Status st = TypeParam::layer_masks(types, to_params(s), &actual);
    ref::LayerMasks expected;
    std::string error;
    try {
      expected = ref::layer_masks(types, s);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    ASSERT_EQ(st.ok(), error.empty()) << st.message() << " / " << error;
    if (!st.ok()) {
      EXPECT_EQ(st.message(), error);
      continue;
    }
    EXPECT_EQ(actual.layer_to_mask, expected.layer_to_mask);
    ASSERT_EQ(actual.masks.size(), expected.masks.size());
    for (size_t m = 0; m < actual.masks.size(); ++m) {
      EXPECT_EQ(actual.masks[m].layer_type, expected.masks[m].layer_type);
      EXPECT_EQ(static_cast<int>(actual.masks[m].kind), static_cast<int>(expected.masks[m].kind));
      EXPECT_EQ(actual.masks[m].mask, expected.masks[m].mask);
      EXPECT_EQ(actual.masks[m].needed, expected.masks[m].needed);
    }
  }
}

TYPED_TEST_P(MaskBuilderTest, UnknownLayerTypeIsANamedError) {
  ref::MaskSpec s;
  s.q_len = 4;
  s.kv_length = 8;
  s.static_cache = true;
  kernels::LayerMasks out;
  const Status st = TypeParam::layer_masks(
      {"linear_attention", "linear_attention", "full_attention", "xyz"}, to_params(s), &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unknown layer type 'xyz' at layer 3");
  EXPECT_TRUE(out.masks.empty());
  // The bug this guards against: a hybrid static-cache model must get a mask for every type.
  ASSERT_TRUE(
      TypeParam::layer_masks({"linear_attention", "full_attention"}, to_params(s), &out).ok());
  EXPECT_EQ(out.masks.size(), 2u);
  EXPECT_EQ(out.masks[0].kind, kernels::LayerMaskKind::kNone);
  EXPECT_TRUE(out.masks[1].needed);
}

TYPED_TEST_P(MaskBuilderTest, InvalidParamsAreRejected) {
  kernels::MaskParams p;
  p.q_len = 4;
  p.kv_length = 3;
  std::vector<uint8_t> out(16);
  EXPECT_EQ(TypeParam::build_bool_mask(p, out.data()).code(), StatusCode::kInvalidArgument);
  p.kv_length = 4;
  p.causal = false;
  p.chunk_size = 2;
  EXPECT_FALSE(TypeParam::build_bool_mask(p, out.data()).ok());
  p.chunk_size = 0;
  EXPECT_FALSE(TypeParam::build_bool_mask(p, nullptr).ok());
  EXPECT_TRUE(TypeParam::build_bool_mask(p, out.data()).ok());
}

TYPED_TEST_P(MaskBuilderTest, SegmentsRandomLayoutsMatchReference) {
  Rng rng{4242};
  for (int i = 0; i < 300; ++i) {
    const int64_t batch = rng.uniform(0, 3), len = rng.uniform(0, 20);
    std::vector<int64_t> pos;
    for (int64_t b = 0; b < batch; ++b) append_position_row(rng, len, &pos);
    const ref::PackedSegments expected = ref::segments_from_position_ids(pos, batch, len);
    kernels::PackedSegments actual;
    ASSERT_TRUE(TypeParam::segments_from_position_ids(pos.data(), batch, len, &actual).ok());
    EXPECT_EQ(actual.cu_seqlens, expected.cu_seqlens);
    EXPECT_EQ(actual.sequence_index, expected.sequence_index);
    EXPECT_EQ(actual.max_seqlen, expected.max_seqlen);

    std::vector<uint8_t> padding;
    for (int64_t t = 0; t < batch * len; ++t) padding.push_back(rng.coin(60) ? 1 : 0);
    const ref::Unpadded ue = ref::unpad(padding, batch, len);
    kernels::Unpadded ua;
    ASSERT_TRUE(TypeParam::unpad(padding.data(), batch, len, &ua).ok());
    EXPECT_EQ(ua.indices, ue.indices);
    EXPECT_EQ(ua.cu_seqlens, ue.cu_seqlens);
    EXPECT_EQ(ua.max_seqlen, ue.max_seqlen);

    std::vector<int64_t> cu = {0};
    const int64_t seqs = rng.uniform(0, 6);
    for (int64_t k = 0; k < seqs; ++k)
      cu.push_back(cu.back() + (rng.coin(30) ? 0 : rng.uniform(1, 9)));
    const std::vector<int64_t> index = ref::sequence_index_from_cu_seqlens(cu);
    std::vector<int64_t> got(index.size(), -7);
    ASSERT_TRUE(TypeParam::sequence_index_from_cu_seqlens(cu.data(), seqs, got.data()).ok());
    EXPECT_EQ(got, index);
  }
  const int64_t bad[] = {0, 3, 2};
  int64_t sink[3];
  EXPECT_FALSE(TypeParam::sequence_index_from_cu_seqlens(bad, 2, sink).ok());
}

REGISTER_TYPED_TEST_SUITE_P(MaskBuilderTest, RandomSpecsMatchReferenceBitExactly, LargeMask,
                            LayerMasksMatchReference, UnknownLayerTypeIsANamedError,
                            InvalidParamsAreRejected, SegmentsRandomLayoutsMatchReference);

}  // namespace deltacheck::testbed
