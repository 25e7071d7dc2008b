// Rounding to narrower number formats, for the same-precision tolerance baselines: what a value
// becomes when a kernel stores it in bf16 / fp16, or when a tensor core reads it as a TF32 (or
// bf16 / fp16) matmul operand. Written here, from the formats' definitions, so that the baselines
// share no conversion code with the kernels they judge (core/half.h).
//
// Round to nearest, ties to even, on the exact double value; overflow goes to infinity and
// gradual underflow follows each format's subnormals.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/simd.h"

namespace deltacheck::reference {

enum class Rounding {
  kNone,  // keep the compute type (fp32 or fp64)
  kTF32,  // 10 explicit mantissa bits, fp32's exponent range (tensor-core fp32 matmul operands)
  kBF16,  // 7 explicit mantissa bits, fp32's exponent range
  kF16,   // 10 explicit mantissa bits, exponents -14..15, subnormals down to 2^-24
};

const char* rounding_name(Rounding r);

namespace detail {
// x rounded to `mantissa` explicit fraction bits with smallest normal exponent `emin` and largest
// finite magnitude `max_finite`.
inline double round_to_format(double x, int mantissa, int emin, double max_finite) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin;  // subnormal range: a fixed quantum
  const double quantum = std::ldexp(1.0, e - mantissa);
  const double r = std::nearbyint(x / quantum) * quantum;  // ties to even (default mode)
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}
}  // namespace detail

inline double round_to(Rounding r, double x) {
  switch (r) {
    case Rounding::kTF32:
      return detail::round_to_format(x, 10, -126, 0x1.ffcp127);
    case Rounding::kBF16:
      return detail::round_to_format(x, 7, -126, 0x1.fep127);
    case Rounding::kF16:
      return detail::round_to_format(x, 10, -14, 65504.0);
    case Rounding::kNone:
      break;
  }
  return x;
}

namespace detail {
// A finite float rounded to nearest even on its own bits, dropping the lowest `drop` of its 23
// fraction bits. For TF32 and bf16, whose exponent range is fp32's, a float's quantum in the
// narrower format is 2^drop of its own (subnormals included), so this gives the bits of
// round_to_format(); a carry past the largest finite value makes the bits of infinity, as
// round_to_format() overflows. Infinities and NaN are returned as they are.
DELTACHECK_ALWAYS_INLINE float round_float_bits(float x, int drop) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;
  const uint32_t lsb = (b >> drop) & 1u;
  b = (b + ((1u << (drop - 1)) - 1u) + lsb) & ~((1u << drop) - 1u);
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// A finite float rounded to fp16's values (kept in a float) with the bits of round_to_format():
// where fp16 is normal (|x| >= 2^-14) its quantum is 2^13 of the float's, as for TF32, and a
// result above 65504 overflows to infinity; below, the quantum is fixed at 2^-24, which is the
// quantum of floats in [0.5, 1): |x| + 0.5 rounds there to nearest even (0.5 is an even multiple
// of 2^-24) and subtracting 0.5 again is exact. The sign is kept (a tiny negative value becomes
// -0, as x / quantum rounds to -0 in the definition).
DELTACHECK_ALWAYS_INLINE float round_float_fp16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  const uint32_t mag = b & 0x7fffffffu;
  if (mag >= 0x7f800000u) return x;  // infinities and NaN
  if (mag >= 0x38800000u) {          // 2^-14
    const float r = round_float_bits(x, 13);
    return std::fabs(r) > 65504.0f ? std::copysign(std::numeric_limits<float>::infinity(), x) : r;
  }
  const float r = (std::fabs(x) + 0.5f) - 0.5f;  // (IEEE arithmetic: never folded into |x|)
  return std::copysign(r, x);
}
}  // namespace detail

// The same for a float: the result is exactly representable in fp32 for every format above and
// equal to the double version's (on the float's bits for all three). Inlined into the baselines'
// loops (and their AVX2 clones), where it runs on every element.
DELTACHECK_ALWAYS_INLINE float round_to(Rounding r, float x) {
  switch (r) {
    case Rounding::kNone:
      return x;
    case Rounding::kTF32:
      return detail::round_float_bits(x, 13);
    case Rounding::kBF16:
      return detail::round_float_bits(x, 16);
    case Rounding::kF16:
      return detail::round_float_fp16(x);
  }
  return x;
}

}  // namespace deltacheck::reference
