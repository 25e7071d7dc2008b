// bf16 / fp16 conversions: round to nearest even, subnormals, overflow, NaN, against exhaustive
// decoding of every 16-bit pattern.
#include <gtest/gtest.h>

#include <cmath>

#include "core/half.h"

namespace deltacheck {
namespace {

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7fffffu)), 0x7f80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Half, Fp16EveryPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), h) << std::hex << h;
  }
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << h;
  }
}

TEST(Half, Fp16RoundsToNearestEvenIncludingSubnormals) {
  EXPECT_EQ(fp16_to_float(float_to_fp16(65504.0f)), 65504.0f);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // tie to even -> inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even -> 0
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -24)), 0x0002);  // tie to even -> 2
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  // Exhaustive check against double-precision rounding on a dense sweep.
  for (float x = 1e-8f; x < 70000.0f; x *= 1.0003f) {
    const uint16_t h = float_to_fp16(x);
    const double r = fp16_to_float(h);
    const double up = fp16_to_float(static_cast<uint16_t>(h + 1));
    const double down = h > 0 ? fp16_to_float(static_cast<uint16_t>(h - 1)) : 0.0;
    if (std::isinf(r)) continue;
    ASSERT_LE(std::fabs(x - r), std::fabs(x - up)) << x;
    ASSERT_LE(std::fabs(x - r), std::fabs(x - down)) << x;
  }
}

}  // namespace
}  // namespace deltacheck
