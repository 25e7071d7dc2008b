// The panel's own storage rounding: float to bf16 / fp16 bit patterns, round to nearest even, and
// back. Written here rather than taken from kernels/common so that a slip in the kernels' shared
// conversions cannot move these yardsticks with them (tests/harness/test_right_backends.cc
// checks both against cases::Tensor on ties, subnormals and overflow).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cases/tensor.h"

namespace deltacheck::backends::right {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t to_bf16_bits(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float from_bf16_bits(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline uint16_t to_fp16_bits(float f) {
  const uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal (or zero) in fp16, in units of 2^-24
    // |f| * 2^24 is exact; nearbyint rounds to nearest even (the default rounding mode).
    // 1024 units is the smallest normal, whose encoding is 0x0400: the carry is right.
    const float units = std::nearbyint(std::fabs(f) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  // Normal: drop 13 mantissa bits with round to nearest even, rebias the exponent (127 -> 15).
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float from_fp16_bits(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 1u : 0u, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float x;
  if (e == 0)
    x = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31)
    x = m ? std::nanf("") : INFINITY;
  else
    x = std::ldexp(static_cast<float>(1024u + m), static_cast<int>(e) - 25);
  return sign ? -x : x;
}

// x rounded to what a tensor of `dtype` holds (fp32: x itself); the compute type T stays.
template <typename T>
T round_to(T x, cases::DType dtype) {
  switch (dtype) {
    case cases::DType::kBF16:
      return static_cast<T>(from_bf16_bits(to_bf16_bits(static_cast<float>(x))));
    case cases::DType::kF16:
      return static_cast<T>(from_fp16_bits(to_fp16_bits(static_cast<float>(x))));
    default:
      return x;
  }
}

// Stores x into element i of an fp32 / bf16 / fp16 tensor, rounded to nearest even.
inline void store(cases::Tensor& t, int64_t i, float x) {
  switch (t.dtype()) {
    case cases::DType::kBF16:
      t.as<uint16_t>()[i] = to_bf16_bits(x);
      return;
    case cases::DType::kF16:
      t.as<uint16_t>()[i] = to_fp16_bits(x);
      return;
    default:
      t.as<float>()[i] = x;
  }
}

}  // namespace deltacheck::backends::right
