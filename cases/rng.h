// Counter-based random numbers (Philox4x32-10) and our own transforms to uniform and normal
// values: element i of a tensor depends only on (seed, tensor name, i), and the same bits come out
// on every platform and standard library (no std::*_distribution, no libm).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace deltacheck::cases {

// Philox4x32 with 10 rounds (Salmon et al., SC'11): four 32-bit words per (key, counter).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// 64-bit FNV-1a of a string, used to give every tensor of a case its own stream.
uint64_t stream_id(std::string_view name);

// A stream of values for one tensor of one case.
//
// The values are computed in blocks (Philox over many counters at once, vectorized: AVX2 where the
// CPU has it, core/simd.h) and the last block of each kind is kept, so a generator that reads
// element by element in increasing order pays one vectorized pass per block. The values are those
// of the definitions (philox4x32() per element), bit for bit, on every path. Because of that cache
// a Stream must not be used from two threads at once (each thread makes its own: it is cheap).
class Stream {
 public:
  Stream(uint64_t seed, std::string_view tensor_name);
  // Uniform in [0, 1) with 24 random bits (exactly representable in fp32).
  double uniform(uint64_t i) const {
    if (i - uniform_begin_ < uniform_size_) return uniform_cache_[i - uniform_begin_];
    return uniform_miss(i);
  }
  // Uniform in [lo, hi).
  double uniform(uint64_t i, double lo, double hi) const { return lo + (hi - lo) * uniform(i); }
  // Approximately standard normal: sum of 12 uniforms minus 6 (Irwin-Hall). Every step is exact
  // in double, so the value is the same on every machine; the range is bounded to [-6, 6).
  double normal(uint64_t i) const {
    if (i - normal_begin_ < normal_size_) return normal_cache_[i - normal_begin_];
    return normal_miss(i);
  }

  // Bulk forms: out[j] = uniform(first + j) / normal(first + j) for j < n, without the cache.
  void uniform_fill(uint64_t first, size_t n, double* out) const;
  void normal_fill(uint64_t first, size_t n, double* out) const;

  static constexpr uint64_t kUniformBlock = 96, kNormalBlock = 64;

 private:
  double uniform_miss(uint64_t i) const;
  double normal_miss(uint64_t i) const;

  uint64_t key_;
  mutable uint64_t uniform_begin_ = 0, uniform_size_ = 0, normal_begin_ = 0, normal_size_ = 0;
  mutable double uniform_cache_[kUniformBlock];
  mutable double normal_cache_[kNormalBlock];
};

}  // namespace deltacheck::cases
