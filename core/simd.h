// Which vector code path the machine-independent hot loops take (the input generator's Philox, the
// same-precision baselines in reference/). They are compiled twice, for baseline x86-64 and as an
// AVX2 clone (no FMA, no reassociation: the same operations on the same values in the same order,
// so the same bits), and the AVX2 clone runs where the CPU has it. DELTACHECK_SIMD=portable in the
// environment, or set_simd_portable(true), forces the baseline path (tests run both).
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DELTACHECK_X86_CLONES 1
// A function compiled for AVX2 (FMA stays off: -ffp-contract=off and no "fma" target).
#define DELTACHECK_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define DELTACHECK_X86_CLONES 0
#define DELTACHECK_TARGET_AVX2
#endif
// The bodies both clones share are inlined into each, so each is compiled for its target.
#if defined(__GNUC__) || defined(__clang__)
#define DELTACHECK_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define DELTACHECK_ALWAYS_INLINE inline
#endif

namespace deltacheck::core {

namespace detail {
inline std::atomic<bool>& simd_portable_flag() {
  static std::atomic<bool> portable{[] {
    const char* v = std::getenv("DELTACHECK_SIMD");
    return v != nullptr && std::strcmp(v, "portable") == 0;
  }()};
  return portable;
}
}  // namespace detail

// Force (true) or release (false) the baseline x86-64 path of the cloned loops.
inline void set_simd_portable(bool portable) {
  detail::simd_portable_flag().store(portable, std::memory_order_relaxed);
}

// Whether the AVX2 clones run: the CPU has AVX2 and nothing forced the portable path.
inline bool use_avx2() {
#if DELTACHECK_X86_CLONES
  static const bool have = [] {
    __builtin_cpu_init();  // (needed where this runs before the runtime's own initializer)
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have && !detail::simd_portable_flag().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

}  // namespace deltacheck::core
