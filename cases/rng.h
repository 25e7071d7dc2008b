// Counter-based random numbers (Philox4x32-10) and our own transforms to uniform and normal
// values: element i of a tensor depends only on (seed, tensor name, i), and the same bits come out
// on every platform and standard library (no std::*_distribution, no libm).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace deltacheck::cases {

// Philox4x32 with 10 rounds (Salmon et al., SC'11): four 32-bit words per (key, counter).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// 64-bit FNV-1a of a string, used to give every tensor of a case its own stream.
uint64_t stream_id(std::string_view name);

// A stream of values for one tensor of one case.
class Stream {
 public:
  Stream(uint64_t seed, std::string_view tensor_name);
  // Uniform in [0, 1) with 24 random bits (exactly representable in fp32).
  double uniform(uint64_t i) const;
  // Uniform in [lo, hi).
  double uniform(uint64_t i, double lo, double hi) const { return lo + (hi - lo) * uniform(i); }
  // Approximately standard normal: sum of 12 uniforms minus 6 (Irwin-Hall). Every step is exact
  // in double, so the value is the same on every machine; the range is bounded to [-6, 6).
  double normal(uint64_t i) const;

 private:
  uint64_t key_;
};

}  // namespace deltacheck::cases
