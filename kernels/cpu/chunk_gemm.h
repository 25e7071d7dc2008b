// The register-blocked fp32 matrix product of the CPU chunked kernels (the forward in
// kernels/cpu/gated_delta_rule.cc, the backward in
// kernels/cpu/gated_delta_rule_backward_chunked.cc): C (+)= A B on small row-major blocks, plain
// C++ that -O3 -march=native vectorizes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace deltacheck::kernels::cpu::chunk_gemm {

// Every product of the chunked form is C (+)= A B on small row-major fp32 blocks (at most
// chunk x max(K, V) by max(K, V) x max(K, V)). They run through one register-blocked loop nest:
// kRows rows of C by kCols columns kept in a local accumulator the compiler holds in vector
// registers (24 of them for 6 x 64 floats with AVX-512), B streamed row by row, A broadcast. The
// loops are plain C++; -O3 -march=native vectorizes and contracts them to FMAs.

constexpr int64_t kRows = 6;
constexpr int64_t kCols = 64;

// How C starts: overwritten (C's contents are never read), or c_scale * C.
struct Start {
  bool load;
  float scale;
};
constexpr Start kOverwrite{false, 0.0f};
constexpr Start kAccumulate{true, 1.0f};

template <int64_t MR, int64_t NC>
inline void block_fixed(int64_t kd, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* c, int64_t ldc, Start start) {
  float acc[MR][NC];
  for (int64_t r = 0; r < MR; ++r)
    for (int64_t j = 0; j < NC; ++j) acc[r][j] = start.load ? start.scale * c[r * ldc + j] : 0.0f;
  for (int64_t i = 0; i < kd; ++i) {
    const float* bi = b + i * ldb;
    for (int64_t r = 0; r < MR; ++r) {
      const float ar = a[r * lda + i];
      for (int64_t j = 0; j < NC; ++j) acc[r][j] += ar * bi[j];
    }
  }
  for (int64_t r = 0; r < MR; ++r)
    for (int64_t j = 0; j < NC; ++j) c[r * ldc + j] = acc[r][j];
}

// Any block of at most kRows x kCols (edges: odd head dims, short tail chunks).
inline void block_any(int64_t mr, int64_t nc, int64_t kd, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float* c, int64_t ldc, Start start) {
  float acc[kRows][kCols];
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nc; ++j) acc[r][j] = start.load ? start.scale * c[r * ldc + j] : 0.0f;
  for (int64_t i = 0; i < kd; ++i) {
    const float* bi = b + i * ldb;
    for (int64_t r = 0; r < mr; ++r) {
      const float ar = a[r * lda + i];
      for (int64_t j = 0; j < nc; ++j) acc[r][j] += ar * bi[j];
    }
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nc; ++j) c[r * ldc + j] = acc[r][j];
}

// One block of MR full rows: the widest fixed-width column pieces that fit, then any remainder.
template <int64_t MR>
inline void row_block(int64_t nc, int64_t kd, const float* a, int64_t lda, const float* b,
                      int64_t ldb, float* c, int64_t ldc, Start start) {
  for (int64_t j = 0; j < nc;) {
    const int64_t left = nc - j;
    if (left >= 64) {
      block_fixed<MR, 64>(kd, a, lda, b + j, ldb, c + j, ldc, start);
      j += 64;
    } else if (left >= 32) {
      block_fixed<MR, 32>(kd, a, lda, b + j, ldb, c + j, ldc, start);
      j += 32;
    } else if (left >= 16) {
      block_fixed<MR, 16>(kd, a, lda, b + j, ldb, c + j, ldc, start);
      j += 16;
    } else {
      block_any(MR, left, kd, a, lda, b + j, ldb, c + j, ldc, start);
      j += left;
    }
  }
}

// C[m x n] = start(C) + A[m x kd] B[kd x n]. Column blocks outermost, so the kd x kCols panel of
// B stays in L1 while every row block of A passes over it. Rows go kRows at a time; a chunk of
// 64 leaves 4, which get their own fixed-size path.
inline void gemm(int64_t m, int64_t n, int64_t kd, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, Start start) {
  for (int64_t j0 = 0; j0 < n; j0 += kCols) {
    const int64_t nc = std::min(kCols, n - j0);
    for (int64_t r0 = 0; r0 < m;) {
      const int64_t mr = std::min(kRows, m - r0);
      const float* ab = a + r0 * lda;
      const float* bb = b + j0;
      float* cb = c + r0 * ldc + j0;
      if (mr == kRows) {
        row_block<kRows>(nc, kd, ab, lda, bb, ldb, cb, ldc, start);
        r0 += kRows;
      } else if (mr >= 4) {
        row_block<4>(nc, kd, ab, lda, bb, ldb, cb, ldc, start);
        r0 += 4;
      } else {
        block_any(mr, nc, kd, ab, lda, bb, ldb, cb, ldc, start);
        r0 += mr;
      }
    }
  }
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace deltacheck::kernels::cpu::chunk_gemm
