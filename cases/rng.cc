// Philox4x32-10 and the uniform / normal transforms.
#include "cases/rng.h"

namespace deltacheck::cases {
namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
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

double Stream::uniform(uint64_t i) const {
  // Four words per counter: element i uses word i % 4 of counter i / 4.
  const auto w = philox4x32(key_, 0, i >> 2);
  return static_cast<double>(w[i & 3] >> 8) * (1.0 / 16777216.0);
}

double Stream::normal(uint64_t i) const {
  // Counters in a separate half of the space (hi word 1) so normal(i) and uniform(i) differ.
  double sum = 0.0;
  for (uint64_t j = 0; j < 3; ++j) {
    const auto w = philox4x32(key_, 1, i * 3 + j);
    for (uint32_t x : w) sum += static_cast<double>(x >> 8) * (1.0 / 16777216.0);
  }
  return sum - 6.0;
}

}  // namespace deltacheck::cases
