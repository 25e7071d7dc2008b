// bf16 and fp16 storage formats: bit-exact conversions (round to nearest even, as the hardware
// converts), shared by the input generator and the kernels. The FP64 reference never sees them.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace deltacheck {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: value = man * 2^-24, exact in fp32
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // result is subnormal (or zero) in fp16: round a * 2^24 to an integer, nearest even
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;  // value = m * 2^(e-150); the fp16 subnormal count is value * 2^24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent, round 13 dropped bits to nearest even
  uint32_t r = a + 0xc8000fffu + ((a >> 13) & 1u);  // (a - (112 << 23)) + 0xfff + lsb
  return static_cast<uint16_t>(sign | (r >> 13));
}

// Load one element of a tensor stored in `t` as float.
inline float load_as_float(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    default:  // not a storage type of the kernels: they reject it up front
      break;
  }
  return 0.0f;
}

// Store a float into a tensor of type `t`, rounding to nearest even.
inline void store_from_float(void* base, DType t, int64_t i, float x) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = x;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = float_to_fp16(x);
      break;
    default:  // not a storage type of the kernels: they reject it up front
      break;
  }
}

}  // namespace deltacheck
