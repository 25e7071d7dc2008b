// The counter-based generator and its transforms: known-answer vectors and pinned values, so any
// change of the bits a seed produces fails here first.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cases/det_math.h"
#include "cases/rng.h"
#include "core/simd.h"

namespace deltacheck::cases {
namespace {

// Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
TEST(Philox, KnownAnswerVectors) {
  auto w = philox4x32(0, 0, 0);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  w = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(w[0], 0x408f276du);
  EXPECT_EQ(w[1], 0x41c83b0eu);
  EXPECT_EQ(w[2], 0xa20bc7c6u);
  EXPECT_EQ(w[3], 0x6d5451fdu);
  // counter 243f6a88 85a308d3 13198a2e 03707344, key a4093822 299f31d0
  w = philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  EXPECT_EQ(w[0], 0xd16cfe09u);
  EXPECT_EQ(w[1], 0x94fdccebu);
  EXPECT_EQ(w[2], 0x5001e420u);
  EXPECT_EQ(w[3], 0x24126ea1u);
}

TEST(Stream, PinnedValues) {
  const Stream s(7, "q/0");
  // Pinned on the day the generator was written; a change here changes every case's inputs.
  EXPECT_EQ(s.uniform(0), 0x1.fcd3b6p-1);
  EXPECT_EQ(s.uniform(1), 0x1.051d7p-4);
  EXPECT_EQ(s.uniform(5), 0x1.268cp-7);
  EXPECT_EQ(s.normal(0), -0x1.b90a5ap+0);
  EXPECT_EQ(s.normal(3), -0x1.f062d6p-1);
}

TEST(Stream, UniformRangeAndNormalMoments) {
  const Stream s(123, "v/3");
  double mean = 0, var = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = s.uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const double x = s.normal(i);
    mean += x / n;
    var += x * x / n;
  }
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(Stream, StreamsDifferByNameAndSeed) {
  EXPECT_NE(Stream(1, "q/0").uniform(0), Stream(1, "k/0").uniform(0));
  EXPECT_NE(Stream(1, "q/0").uniform(0), Stream(2, "q/0").uniform(0));
  EXPECT_NE(Stream(1, "q/0").uniform(0), Stream(1, "q/1").uniform(0));
}

// The definitions of uniform(i) and normal(i) (cases/rng.cc), element by element from Philox.
double uniform_definition(uint64_t key, uint64_t i) {
  return static_cast<double>(philox4x32(key, 0, i >> 2)[i & 3] >> 8) * (1.0 / 16777216.0);
}
double normal_definition(uint64_t key, uint64_t i) {
  double sum = 0.0;
  for (uint64_t j = 0; j < 3; ++j)
    for (uint32_t x : philox4x32(key, 1, i * 3 + j))
      sum += static_cast<double>(x >> 8) * (1.0 / 16777216.0);
  return sum - 6.0;
}

// The blocked, vectorized forms give the definitions' bits on both code paths, at any offset and
// length, through the cache in any order, and at indices whose counters wrap around 2^64.
TEST(Stream, BulkAndCachedValuesAreTheDefinitions) {
  for (const bool portable : {false, true}) {
    core::set_simd_portable(portable);
    const uint64_t seed = 99;
    const uint64_t key = seed ^ stream_id("k/2");
    for (const uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{95},
                                 uint64_t{1} << 40, ~uint64_t{0} - 300}) {
      std::vector<double> u(203), n(203);
      const Stream s(seed, "k/2");
      s.uniform_fill(first, u.size(), u.data());
      s.normal_fill(first, n.size(), n.data());
      for (size_t j = 0; j < u.size(); ++j) {
        ASSERT_EQ(u[j], uniform_definition(key, first + j)) << portable << " " << first << "+" << j;
        ASSERT_EQ(n[j], normal_definition(key, first + j)) << portable << " " << first << "+" << j;
      }
      const Stream cached(seed, "k/2");  // backwards, then forwards: misses and hits
      for (size_t j = u.size(); j-- > 0;) {
        ASSERT_EQ(cached.uniform(first + j), u[j]) << portable << " " << first << "+" << j;
        ASSERT_EQ(cached.normal(first + j), n[j]) << portable << " " << first << "+" << j;
      }
      for (size_t j = 0; j < u.size(); ++j) ASSERT_EQ(cached.normal(first + j), n[j]);
    }
    for (uint64_t i = ~uint64_t{0} - 5; i != 0; ++i) {  // the last indices, to 2^64 - 1
      EXPECT_EQ(Stream(seed, "k/2").uniform(i), uniform_definition(key, i)) << i;
      EXPECT_EQ(Stream(seed, "k/2").normal(i), normal_definition(key, i)) << i;
    }
  }
  core::set_simd_portable(false);
}

TEST(DetMath, CloseToLibm) {
  for (double x = -740; x < 700; x += 0.731) {
    const double e = std::exp(x);
    EXPECT_NEAR(det_exp(x), e, 4e-16 * e) << x;
  }
  for (double x = 1e-300; x < 1e300; x *= 7.3)
    EXPECT_NEAR(det_log(x), std::log(x), 1e-15 * std::fabs(std::log(x)) + 1e-16) << x;
  EXPECT_NEAR(det_log_sigmoid(0.0), std::log(0.5), 1e-16);
  EXPECT_NEAR(det_log_sigmoid(-50.0), -50.0, 1e-12);
  EXPECT_NEAR(det_log_sigmoid(50.0), -std::exp(-50.0), 1e-35);
  EXPECT_NEAR(det_log_sigmoid(0.3), std::log(1.0 / (1.0 + std::exp(-0.3))), 1e-16);
  EXPECT_EQ(det_exp(0.0), 1.0);
  EXPECT_EQ(det_log(1.0), 0.0);
}

}  // namespace
}  // namespace deltacheck::cases
