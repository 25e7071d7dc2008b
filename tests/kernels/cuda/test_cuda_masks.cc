// The CUDA mask and segment kernels against the reference, bit for bit (cuda_kernels_testbed.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/mask.h"
#include "reference/mask.h"
#include "tests/kernels/cuda/cuda_kernels_testbed.h"

namespace deltacheck::kernels::cuda {
namespace {

using namespace testbed;  // NOLINT(build/namespaces): the testbed is these tests' own

// ---- masks -----------------------------------------------------------------------------------

struct MaskCase {
  std::string name;
  reference::MaskSpec spec;
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

std::vector<int64_t> packed_positions(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// Positions that restart at 0 after each of `lens`.
std::vector<int64_t> restarts(const std::vector<int64_t>& lens) {
  std::vector<int64_t> p;
  for (int64_t n : lens) {
    for (int64_t i = 0; i < n; ++i) p.push_back(i);
  }
  return p;
}

std::vector<uint8_t> left_padded(int64_t batch, int64_t kv, const std::vector<int64_t>& zeros) {
  std::vector<uint8_t> m(static_cast<size_t>(batch * kv), 1);
  for (int64_t b = 0; b < batch; ++b) {
    std::fill_n(m.begin() + b * kv, zeros[static_cast<size_t>(b)], 0);
  }
  return m;
}

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  auto add = [&](const std::string& name, const reference::MaskSpec& s) {
    cases.push_back({name, s});
  };
  reference::MaskSpec s;
  s.batch = 2, s.q_len = 37, s.kv_length = 37;
  add("causal", s);

  s = {};
  s.batch = 2, s.q_len = 5, s.kv_length = 45, s.q_offset = {40}, s.sliding_window = 8;
  add("window_with_cache", s);

  s = {};
  s.batch = 2, s.q_len = 50, s.kv_length = 50, s.chunk_size = 16;
  s.padding_mask = left_padded(2, 50, {7, 0});
  add("chunked_left_padding", s);

  s = {};
  s.batch = 2, s.q_len = 6, s.kv_length = 64, s.q_offset = {10, 3}, s.static_cache = true;
  s.padding_mask = left_padded(2, 64, {2, 0});
  add("static_cache_per_row_offsets", s);

  s = {};
  s.batch = 2, s.q_len = 40, s.kv_length = 40;
  s.position_ids = packed_positions({restarts({13, 9, 18}), restarts({40})});
  s.position_ids[40 + 25] = s.position_ids[40 + 24];  // a repeated position starts a segment
  add("packed_segments", s);

  s = {};
  s.batch = 2, s.q_len = 12, s.kv_length = 40, s.q_offset = {5, 20};
  s.position_ids = packed_positions({restarts({4, 8}), restarts({12})});
  for (int64_t i = 0; i < 12; ++i) s.position_ids[static_cast<size_t>(12 + i)] += 20;
  add("segments_after_cache", s);

  s = {};
  s.batch = 1, s.q_len = 30, s.kv_length = 30, s.causal = false;
  s.padding_mask = left_padded(1, 30, {3});
  s.position_ids = restarts({10, 20});
  add("bidirectional_padding_segments", s);

  s = {};  // keys past the new tokens (unwritten static-cache slots) are in no segment
  s.batch = 1, s.q_len = 10, s.kv_length = 16, s.causal = false, s.static_cache = true;
  s.position_ids = restarts({4, 6});
  add("bidirectional_static_cache_segments", s);

  s = {};
  s.batch = 1, s.q_len = 20, s.kv_length = 20, s.position_id_rows = 3;
  s.position_ids = restarts({7, 13});  // row 0 decides packing
  for (int r = 1; r < 3; ++r) {
    for (int64_t i = 0; i < 20; ++i) s.position_ids.push_back((i * 7 + r) % 5);
  }
  add("multimodal_rows", s);

  s = {};
  s.batch = 2, s.q_len = 70, s.kv_length = 80, s.q_offset = {10}, s.sliding_window = 20;
  s.chunk_size = 32;
  s.padding_mask = left_padded(2, 80, {5, 12});
  s.position_ids = packed_positions({restarts({30, 40}), restarts({70})});
  add("everything", s);

  s = {};
  s.batch = 2, s.q_len = 1, s.kv_length = 3000, s.q_offset = {2999, 1500};
  s.padding_mask = left_padded(2, 3000, {0, 700});
  add("decode_long_static_cache", s);
  return cases;
}

class CudaMask : public ::testing::TestWithParam<MaskCase> {};

TEST_P(CudaMask, MatchesTheReferenceBitForBit) {
  DC_REQUIRE_DEVICE();
  const reference::MaskSpec& s = GetParam().spec;
  const std::vector<uint8_t> ref = reference::build_bool_mask(s);
  const auto allowed = std::count(ref.begin(), ref.end(), uint8_t{1});
  ASSERT_GT(allowed, 0) << "degenerate case: nothing allowed";
  ASSERT_LT(allowed, static_cast<int64_t>(ref.size())) << "degenerate case: nothing masked";

  std::vector<int64_t> offsets = s.q_offset;
  if (offsets.size() == 1) offsets.assign(static_cast<size_t>(s.batch), s.q_offset[0]);
  DeviceBuffer d_offsets(offsets), d_padding(s.padding_mask), d_positions(s.position_ids);
  DeviceBuffer d_out(ref.size());
  d_out.fill(kPoison);
  MaskParams p;
  p.batch = s.batch;
  p.q_len = s.q_len;
  p.kv_length = s.kv_length;
  p.q_offsets = offsets.empty() ? nullptr : d_offsets.as<int64_t>();
  p.causal = s.causal;
  p.sliding_window = s.sliding_window;
  p.chunk_size = s.chunk_size;
  p.padding_mask = s.padding_mask.empty() ? nullptr : d_padding.as<uint8_t>();
  p.position_ids = s.position_ids.empty() ? nullptr : d_positions.as<int64_t>();
  p.position_id_rows = s.position_id_rows;
  p.static_cache = s.static_cache;
  DC_EXPECT_OK(build_bool_mask(p, d_out.as<uint8_t>(), nullptr));
  const std::vector<uint8_t> got = d_out.download<uint8_t>();
  int64_t mismatches = 0;
  for (size_t i = 0; i < ref.size() && mismatches < 5; ++i) {
    if (got[i] == ref[i]) continue;
    ++mismatches;
    const int64_t kv = static_cast<int64_t>(i) % s.kv_length;
    const int64_t q = static_cast<int64_t>(i) / s.kv_length % s.q_len;
    const int64_t b = static_cast<int64_t>(i) / (s.kv_length * s.q_len);
    ADD_FAILURE() << "(b " << b << ", q " << q << ", kv " << kv << "): got " << int{got[i]}
                  << ", reference " << int{ref[i]} << " (" << reference::explain(s, b, q, kv).detail
                  << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMask, ::testing::ValuesIn(mask_cases()),
                         [](const ::testing::TestParamInfo<MaskCase>& info) {
                           return info.param.name;
                         });

TEST(CudaSegments, FromPositionIdsAcrossScanTiles) {
  DC_REQUIRE_DEVICE();
  const int64_t batch = 2, len = 1500;  // 3000 tokens: several tiles of the block scan
  SplitMix64 rng(41);
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t p = static_cast<int64_t>(rng.next() % 5);  // rows need not start at 0
    for (int64_t t = 0; t < len; ++t) {
      const uint64_t r = rng.next() % 100;
      if (r < 3)
        p = 0;  // restart
      else if (r < 4)
        p += 2;  // a jump
      else if (r < 5)
        p = std::max<int64_t>(p - 1, 0);  // a repeat or a step back
      else
        p += 1;
      pos.push_back(p);
    }
  }
  const reference::PackedSegments ref = reference::segments_from_position_ids(pos, batch, len);
  ASSERT_GT(ref.cu_seqlens.size(), 40u) << "degenerate case: too few segments";

  DeviceBuffer d_pos(pos), d_cu(static_cast<size_t>(batch * len + 1) * sizeof(int64_t)),
      d_index(static_cast<size_t>(batch * len) * sizeof(int64_t)), d_count(sizeof(int64_t)),
      d_max(sizeof(int64_t));
  d_cu.fill(kPoison);
  SegmentParams p;
  p.position_ids = d_pos.as<int64_t>();
  p.batch = batch;
  p.len = len;
  p.cu_seqlens = d_cu.as<int64_t>();
  p.sequence_index = d_index.as<int64_t>();
  p.num_segments = d_count.as<int64_t>();
  p.max_seqlen = d_max.as<int64_t>();
  DC_EXPECT_OK(segments_from_position_ids(p, nullptr));
  const int64_t count = d_count.download<int64_t>()[0];
  ASSERT_EQ(count + 1, static_cast<int64_t>(ref.cu_seqlens.size()));
  std::vector<int64_t> cu = d_cu.download<int64_t>();
  cu.resize(static_cast<size_t>(count + 1));
  EXPECT_EQ(cu, ref.cu_seqlens);
  EXPECT_EQ(d_index.download<int64_t>(), ref.sequence_index);
  EXPECT_EQ(d_max.download<int64_t>()[0], ref.max_seqlen);

  // No tokens: one boundary, no segment.
  p.batch = 0;
  DC_EXPECT_OK(segments_from_position_ids(p, nullptr));
  EXPECT_EQ(d_count.download<int64_t>()[0], 0);
  EXPECT_EQ(d_cu.download<int64_t>()[0], 0);
  EXPECT_EQ(d_max.download<int64_t>()[0], 0);
}

}  // namespace
}  // namespace deltacheck::kernels::cuda
