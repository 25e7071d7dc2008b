// Philox4x32-10 and the uniform / normal transforms.
#include "cases/rng.h"

#include <algorithm>

#include "core/simd.h"

#if DELTACHECK_X86_CLONES
#include <immintrin.h>
#endif

namespace deltacheck::cases {
namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Philox4x32-10 of kLanes consecutive counters (counter_hi, lo0 + l), l < kLanes, kept as four
// arrays of words (word w of counter l in w[w][l]), so every round is a loop over independent lanes
// that the compiler turns into vector multiplies (pmuludq). Integer arithmetic: every path gives
// the bits of philox4x32().
constexpr int kLanes = 24;  // a multiple of 3 (normals) and of 8 (AVX2 registers)
struct Lanes {
  uint32_t w[4][kLanes];
};

__attribute__((always_inline)) inline void philox_lanes_body(uint64_t key, uint64_t counter_hi,
                                                             uint64_t lo0, Lanes& out) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t lo = lo0 + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(lo);
    c1[l] = static_cast<uint32_t>(lo >> 32);
    c2[l] = static_cast<uint32_t>(counter_hi);
    c3[l] = static_cast<uint32_t>(counter_hi >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * c0[l],
                     p1 = static_cast<uint64_t>(kM1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<uint32_t>(p0);
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kLanes; ++l) {
    out.w[0][l] = c0[l];
    out.w[1][l] = c1[l];
    out.w[2][l] = c2[l];
    out.w[3][l] = c3[l];
  }
}

void philox_lanes_portable(uint64_t key, uint64_t counter_hi, uint64_t lo0, Lanes& out) {
  philox_lanes_body(key, counter_hi, lo0, out);
}
#if DELTACHECK_X86_CLONES
// The same rounds in AVX2 registers, eight lanes each: vpmuludq multiplies the even 32-bit lanes
// (and, shifted down, the odd ones) into 64-bit products, whose halves are blended back into lanes.
DELTACHECK_TARGET_AVX2 void philox_lanes_avx2(uint64_t key, uint64_t counter_hi, uint64_t lo0,
                                              Lanes& out) {
  constexpr int kVecs = kLanes / 8;
  alignas(32) uint32_t lo[kLanes], hi[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t c = lo0 + static_cast<uint64_t>(l);
    lo[l] = static_cast<uint32_t>(c);
    hi[l] = static_cast<uint32_t>(c >> 32);
  }
  __m256i c0[kVecs], c1[kVecs], c2[kVecs], c3[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    c0[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo + 8 * v));
    c1[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi + 8 * v));
    c2[v] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(counter_hi)));
    c3[v] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(counter_hi >> 32)));
  }
  const __m256i m0 = _mm256_set1_epi64x(kM0), m1 = _mm256_set1_epi64x(kM1);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m256i vk0 = _mm256_set1_epi32(static_cast<int>(k0));
    const __m256i vk1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (int v = 0; v < kVecs; ++v) {
      const __m256i e0 = _mm256_mul_epu32(c0[v], m0);
      const __m256i o0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[v], 32), m0);
      const __m256i e1 = _mm256_mul_epu32(c2[v], m1);
      const __m256i o1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[v], 32), m1);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(e0, 32), o0, 0xAA);
      const __m256i lo0v = _mm256_blend_epi32(e0, _mm256_slli_epi64(o0, 32), 0xAA);
      const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(e1, 32), o1, 0xAA);
      const __m256i lo1v = _mm256_blend_epi32(e1, _mm256_slli_epi64(o1, 32), 0xAA);
      c0[v] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[v]), vk0);
      c1[v] = lo1v;
      c2[v] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[v]), vk1);
      c3[v] = lo0v;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int v = 0; v < kVecs; ++v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[0] + 8 * v), c0[v]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[1] + 8 * v), c1[v]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[2] + 8 * v), c2[v]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[3] + 8 * v), c3[v]);
  }
}
#endif

void philox_lanes(uint64_t key, uint64_t counter_hi, uint64_t lo0, Lanes& out) {
#if DELTACHECK_X86_CLONES
  if (core::use_avx2()) return philox_lanes_avx2(key, counter_hi, lo0, out);
#endif
  philox_lanes_portable(key, counter_hi, lo0, out);
}

constexpr double kTwoM24 = 1.0 / 16777216.0;
}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c0, hi0, lo0);
    mulhilo(kM1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

Stream::Stream(uint64_t seed, std::string_view tensor_name) : key_(seed ^ stream_id(tensor_name)) {}

// The definitions, element by element (uniform_fill and normal_fill compute the same values):
//   uniform(i): four words per counter, element i uses word i % 4 of counter i / 4 (hi word 0):
//     (w[i % 4] >> 8) * 2^-24;
//   normal(i): counters 3i, 3i + 1, 3i + 2 in a separate half of the space (hi word 1, so normal(i)
//     and uniform(i) differ): the sum, in order, of the twelve words' (w >> 8) * 2^-24, minus 6.
// In normal(i) every partial sum is a multiple of 2^-24 below 12, exact in double; so is the
// integer sum of the twelve (w >> 8) times 2^-24, which is how the bulk form adds them.
void Stream::uniform_fill(uint64_t first, size_t n, double* out) const {
  Lanes b;
  size_t j = 0;
  while (j < n) {
    const uint64_t i = first + j, counter = i >> 2;
    philox_lanes(key_, 0, counter, b);
    // Element i + m (m >= 0) uses lane (i % 4 + m) / 4, word (i % 4 + m) % 4.
    const size_t skip = static_cast<size_t>(i & 3);
    const size_t take = std::min<size_t>(n - j, 4 * kLanes - skip);
    for (size_t m = 0; m < take; ++m) {
      const size_t e = skip + m;
      out[j + m] = static_cast<double>(b.w[e & 3][e >> 2] >> 8) * kTwoM24;
    }
    j += take;
  }
}

void Stream::normal_fill(uint64_t first, size_t n, double* out) const {
  constexpr size_t kPerPass = kLanes / 3;  // normals per pass of kLanes counters
  Lanes b;
  for (size_t j = 0; j < n; j += kPerPass) {
    philox_lanes(key_, 1, (first + j) * 3, b);
    uint32_t sums[kLanes];
    for (int l = 0; l < kLanes; ++l)
      sums[l] = (b.w[0][l] >> 8) + (b.w[1][l] >> 8) + (b.w[2][l] >> 8) + (b.w[3][l] >> 8);
    const size_t take = std::min(n - j, kPerPass);
    for (size_t m = 0; m < take; ++m) {
      const uint32_t s = sums[3 * m] + sums[3 * m + 1] + sums[3 * m + 2];
      out[j + m] = static_cast<double>(s) * kTwoM24 - 6.0;
    }
  }
}

double Stream::uniform_miss(uint64_t i) const {
  if (i > ~uint64_t{0} - kUniformBlock) {  // a block would wrap around 2^64: the definition
    const auto w = philox4x32(key_, 0, i >> 2);
    return static_cast<double>(w[i & 3] >> 8) * kTwoM24;
  }
  if (uniform_size_ == 0) {
    // A stream's first miss caches one counter's four values, not a block: many streams draw a
    // few values only (a one-token sequence's gate), and a block of 96 would be mostly waste.
    const auto w = philox4x32(key_, 0, i >> 2);
    uniform_begin_ = i & ~uint64_t{3};
    for (int m = 0; m < 4; ++m) uniform_cache_[m] = static_cast<double>(w[m] >> 8) * kTwoM24;
    uniform_size_ = 4;
    return uniform_cache_[i - uniform_begin_];
  }
  uniform_begin_ = i - i % kUniformBlock;
  uniform_fill(uniform_begin_, kUniformBlock, uniform_cache_);
  uniform_size_ = kUniformBlock;
  return uniform_cache_[i - uniform_begin_];
}

double Stream::normal_miss(uint64_t i) const {
  if (i > ~uint64_t{0} / 3 - kNormalBlock) {  // counters 3i + j near 2^64: the definition
    double sum = 0.0;
    for (uint64_t j = 0; j < 3; ++j)
      for (uint32_t x : philox4x32(key_, 1, i * 3 + j))
        sum += static_cast<double>(x >> 8) * kTwoM24;
    return sum - 6.0;
  }
  // A stream's first miss fills one pass of the lanes (kLanes / 3 normals), later ones a block.
  const uint64_t block = normal_size_ == 0 ? kLanes / 3 : kNormalBlock;
  normal_begin_ = i - i % block;
  normal_fill(normal_begin_, block, normal_cache_);
  normal_size_ = block;
  return normal_cache_[i - normal_begin_];
}

}  // namespace deltacheck::cases
