// Deterministic test inputs without the case generator, for the reference's own tests.
#pragma once

#include <cstdint>

namespace deltacheck::reference {

// A 64-bit mix of (tensor, index) to [-1, 1).
inline double mixed(uint64_t tensor, uint64_t i) {
  uint64_t x = (tensor + 1) * 0x9E3779B97F4A7C15ull ^ (i + 0x632BE59BD9B4E019ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return static_cast<double>(x >> 11) * 0x1p-52 - 1.0;
}

}  // namespace deltacheck::reference
