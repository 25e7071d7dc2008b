// Seeded test data for tests that link no test library: splitmix64 and uniform doubles from its
// top 53 bits (no std distributions, so every platform draws the same numbers).
#pragma once

#include <cstdint>

namespace deltacheck::test_support {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53;
  }
};

}  // namespace deltacheck::test_support
