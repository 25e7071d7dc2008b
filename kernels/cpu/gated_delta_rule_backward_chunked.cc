// CPU backward of the gated delta rule in the chunked (WY / UT-transform) form, fp32 accumulation.
//
// Per (sequence, value head) lane, a chunk of n tokens from state S0 (docs/gradients.md, "The
// chunked kernel"): with P_t = e_0 ... e_t, D_tj = e_{j+1} ... e_t (j <= t; products of the
// decays e = exp(g), never a quotient), q scaled and normalized, k normalized,
//   A_tj = beta_t D_tj k_t.k_j (j < t),  (I + A) U = R = diag(beta) (V - diag(P) K S0)
//   O = diag(P) Q S0 + M U,  M_tj = D_tj q_t.k_j (j <= t)
//   S_end = P_last S0 + Kd^T U,  Kd_j = D_last,j k_j
// and with dS the gradient w.r.t. S_end, the reverse of each step:
//   dU = M^T dO + Kd dS;   dR = (I + A)^-T dU;   dM = dO U^T;   dA = -dR U^T;   dKd = U dS^T
//   X = dO S0^T, Y = dR S0^T (so o's and R's reads of S0 need no Q S0 or K S0)
//   dQ = dMD K + diag(P) X;   dK = dMD^T Q + (dA' + dA'^T) K + diag(D_last) dKd - diag(beta P) Y
//   dV = diag(beta) dR;   dS0 = P_last dS + Q^T diag(P) dO - K^T diag(beta P) dR
// where dMD = dM .* D and dA' = dA .* beta D. The gate enters through the cumulative log decay;
// dg_t gathers the terms whose factors contain e_t (pairs i >= t > j of M and A, the tokens at
// and after t through P, and the last token's D_last,j for j < t), each of which is small where
// the decay is strong, so no two large terms cancel (FLA #77, FlashQLA PR #28).
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/chunk_gemm.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "kernels/cpu/gated_delta_rule_backward_lanes.h"
#include "kernels/cpu/row_conversion.h"

namespace deltacheck::kernels::cpu {
namespace {

using backward_lanes::dot, backward_lanes::Lane, backward_lanes::load_normalized,
    backward_lanes::resolved_scale;
using chunk_gemm::gemm, chunk_gemm::kRows, chunk_gemm::Start, chunk_gemm::kOverwrite,
    chunk_gemm::kAccumulate, chunk_gemm::round_up;

// Per-thread buffers, reused across lanes. Row strides of chunk x chunk matrices are Cp (the
// chunk rounded up to 16 floats); [Q; K] and [dO; dR] are stacked (n rows each) so one product
// serves both.
struct Scratch {
  int64_t C = 0, Cp = 0, K = 0, V = 0;
  std::vector<float> starts, ustore;  // per lane: state at each chunk start, U of every token
  std::vector<float> qk, qkt, v, odr, du, ut, s0t, gram, dmat, mm, mt, am, zz, dma, ck, xy;
  std::vector<float> kd, kdt, dq, dk, w, state, ds, decay, cum, beta, dgp, sk, colacc, rq, rk;
  void fit(int64_t C_, int64_t K_, int64_t V_) {
    if (C_ != C || K_ != K || V_ != V) {
      C = C_, K = K_, V = V_, Cp = round_up(C_, 16);
      auto size = [](std::vector<float>& x, int64_t n) { x.assign(static_cast<size_t>(n), 0.0f); };
      size(qk, 2 * C * K), size(qkt, K * 2 * Cp), size(v, C * V), size(odr, 2 * C * V);
      size(du, C * V), size(ut, V * Cp), size(s0t, V * K);
      size(gram, 2 * C * Cp), size(dmat, C * Cp), size(mm, C * Cp), size(mt, C * Cp);
      size(am, C * Cp), size(zz, C * Cp), size(dma, 2 * C * Cp), size(ck, C * 2 * Cp);
      size(xy, 2 * C * K), size(kd, C * K), size(kdt, K * Cp), size(dq, C * K), size(dk, C * K);
      size(w, C * V), size(state, K * V), size(ds, K * V), size(decay, C), size(cum, C),
          size(beta, C), size(dgp, C), size(sk, C);
      size(colacc, C), size(rq, C), size(rk, C);
    }
  }
  void fit_lane(int64_t chunks, int64_t length) {
    auto at_least = [](std::vector<float>& x, int64_t n) {
      if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
    };
    at_least(starts, std::max<int64_t>(chunks, 1) * K * V), at_least(ustore, length * V);
  }
};

// One 16 x 16 tile: dst = src^T.
void transpose_tile(const float* src, int64_t lds, float* dst, int64_t ldd) {
#if defined(__AVX512F__)
  // Pairs, then 64-bit pairs, leave row 4g + c holding column 4L + c of rows 4g .. 4g+3 in its
  // 128-bit lane L; a 4 x 4 transpose of lanes finishes each output row.
  // The zero-masked forms with a full mask are the plain instructions; GCC 12 warns about the
  // undefined pass-through operand of the unmasked intrinsics.
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo(t[i], t[i + 2]), r[i + 1] = hi(t[i], t[i + 2]);
    r[i + 2] = lo(t[i + 1], t[i + 3]), r[i + 3] = hi(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 u0 = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0x44);
    const __m512 u1 = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0xEE);
    const __m512 u2 = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0x44);
    const __m512 u3 = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0xEE);
    _mm512_storeu_ps(dst + (0 + c) * ldd, _mm512_maskz_shuffle_f32x4(kAll, u0, u2, 0x88));
    _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_maskz_shuffle_f32x4(kAll, u0, u2, 0xDD));
    _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_maskz_shuffle_f32x4(kAll, u1, u3, 0x88));
    _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_maskz_shuffle_f32x4(kAll, u1, u3, 0xDD));
  }
#else
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t r = 0; r < 16; ++r) dst[c * ldd + r] = src[r * lds + c];
#endif
}

// dst (cols x rows, row stride ldd) = src^T (rows x cols, row stride lds), in 16 x 16 tiles.
void transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      if (r1 - r0 == kTile && c1 - c0 == kTile) {
        transpose_tile(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
        continue;
      }
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
}

// The decays of a chunk: decay_t = e_t, cum_t = P_t, and D (n x n, row stride Cp) with D_tj for
// j <= t and zeros above, each D_tj a product of decays like the forward's.
void decays(int64_t n, int64_t Cp, float* decay, float* cum, float* D) {
  for (int64_t t = 0; t < n; ++t) {
    cum[t] = t == 0 ? decay[0] : cum[t - 1] * decay[t];
    float* row = D + t * Cp;
    if (t > 0)
      for (int64_t j = 0; j < t; ++j) row[j] = row[j - Cp] * decay[t];
    row[t] = 1.0f;
    for (int64_t j = t + 1; j < Cp; ++j) row[j] = 0.0f;
  }
}

// X_t += sum_{j < t} L_tj X_j for t = 0 .. n-1 (L strictly lower, row stride ldl): blocks of
// kRows rows take the finished rows above them in one product, then their own small triangle.
void substitute_forward(int64_t n, const float* L, int64_t ldl, float* X, int64_t V) {
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t mr = std::min(kRows, n - r0);
    if (r0 > 0) gemm(mr, V, r0, L + r0 * ldl, ldl, X, V, X + r0 * V, V, kAccumulate);
    for (int64_t t = r0 + 1; t < r0 + mr; ++t) {
      float* xt = X + t * V;
      for (int64_t m = r0; m < t; ++m) {
        const float a = L[t * ldl + m];
        const float* xm = X + m * V;
        for (int64_t j = 0; j < V; ++j) xt[j] += a * xm[j];
      }
    }
  }
}

// X_j += sum_{t > j} Up_jt X_t for j = n-1 .. 0 (Up strictly upper): the same, bottom up.
void substitute_backward(int64_t n, const float* Up, int64_t ldu, float* X, int64_t V) {
  for (int64_t r1 = n; r1 > 0;) {
    const int64_t r0 = std::max<int64_t>(0, r1 - kRows);
    if (r1 < n)
      gemm(r1 - r0, V, n - r1, Up + r0 * ldu + r1, ldu, X + r1 * V, V, X + r0 * V, V, kAccumulate);
    for (int64_t j = r1 - 2; j >= r0; --j) {
      float* xj = X + j * V;
      for (int64_t m = j + 1; m < r1; ++m) {
        const float a = Up[j * ldu + m];
        const float* xm = X + m * V;
        for (int64_t c = 0; c < V; ++c) xj[c] += a * xm[c];
      }
    }
    r1 = r0;
  }
}

void lane_backward(const GatedDeltaRuleBackwardParams& bp, const Lane& L, Scratch& s, float* dq_hat,
                   float* dk_hat) {
  const GatedDeltaRuleParams& p = bp.forward;
  const int64_t K = p.key_dim, V = p.value_dim, KV = K * V, HV = p.num_value_heads;
  const int64_t T = p.seq_len, C = p.chunk_size, Cp = s.Cp;
  const int64_t qk_head = L.head / (HV / p.num_heads);
  const int64_t chunks = (L.length + C - 1) / C;
  const float scale = resolved_scale(p);
  s.fit_lane(chunks, L.length);
  auto token = [&](int64_t t) { return (L.row * T + L.begin + t) * HV + L.head; };
  auto qk_row = [&](int64_t t) { return (L.row * T + L.begin + t) * p.num_heads + qk_head; };
  // Loads the chunk's gates and betas, and k (normalized) into rows [k_row0, k_row0 + n) of qk.
  auto load_chunk = [&](int64_t c0, int64_t n, int64_t k_row0) {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t tok = token(c0 + t);
      s.rk[t] = load_normalized(p, p.k, qk_row(c0 + t), &s.qk[(k_row0 + t) * K]);
      load_row(p.v, p.dtype, tok * V, V, &s.v[t * V]);
      s.decay[t] = std::exp(p.g[tok]);
      s.beta[t] = load_as_float(p.beta, p.dtype, tok);
    }
    decays(n, Cp, s.decay.data(), s.cum.data(), s.dmat.data());
  };
  // The rows of one head are H (or HV) rows apart, which the hardware prefetchers do not follow:
  // the next chunk's rows are requested while this one computes, a few tokens after each product
  // (a burst of them all would overflow the miss buffers, which then drop prefetches).
  const int64_t es = dtype_size(p.dtype);
  int64_t pf_next = 0, pf_end = 0;
  bool pf_q = false;
  auto prefetch_some = [&](int64_t count) {
    for (const int64_t stop = std::min(pf_end, pf_next + count); pf_next < stop; ++pf_next) {
      const char* k = static_cast<const char*>(p.k) + qk_row(pf_next) * K * es;
      const char* q = static_cast<const char*>(p.q) + qk_row(pf_next) * K * es;
      const char* v = static_cast<const char*>(p.v) + token(pf_next) * V * es;
      const char* o = static_cast<const char*>(bp.d_output) + token(pf_next) * V * es;
      for (int64_t b = 0; b < K * es; b += 64) {
        __builtin_prefetch(k + b, 0, 2);
        if (pf_q) __builtin_prefetch(q + b, 0, 2);
      }
      for (int64_t b = 0; b < V * es; b += 64) {
        __builtin_prefetch(v + b, 0, 2);
        if (pf_q) __builtin_prefetch(o + b, 0, 2);
      }
    }
  };
  float* const D = s.dmat.data();
  const int64_t state_row = (static_cast<int64_t>(L.slot) * HV + L.head) * KV;

  // ---- forward: each chunk's start state and U
  float* Sv = s.state.data();
  if (p.initial_state)
    std::copy(p.initial_state + state_row, p.initial_state + state_row + KV, Sv);
  else
    std::fill(Sv, Sv + KV, 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * C, n = std::min(C, L.length - c0);
    std::copy(Sv, Sv + KV, &s.starts[c * KV]);
    load_chunk(c0, n, 0);
    pf_next = c0 + n, pf_end = std::min(L.length, c0 + n + C), pf_q = false;
    const int64_t pf_step = (C + 3) / 4;
    const float* Kc = s.qk.data();
    float* KT = s.kdt.data();  // K x Cp
    transpose(n, K, Kc, K, KT, Cp);
    float* G = s.gram.data();
    gemm(n, n, K, Kc, K, KT, Cp, G, Cp, kOverwrite);
    prefetch_some(pf_step);
    float* Am = s.am.data();  // -A, strictly lower
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < t; ++j) Am[t * Cp + j] = -s.beta[t] * D[t * Cp + j] * G[t * Cp + j];
    float* W = s.w.data();
    gemm(n, V, K, Kc, K, Sv, V, W, V, kOverwrite);
    prefetch_some(pf_step);
    float* U = &s.ustore[c0 * V];
    for (int64_t t = 0; t < n; ++t) {
      const float b = s.beta[t], pt = s.cum[t];
      for (int64_t j = 0; j < V; ++j) U[t * V + j] = b * (s.v[t * V + j] - pt * W[t * V + j]);
    }
    substitute_forward(n, Am, Cp, U, V);
    prefetch_some(pf_step);
    // S = P_last S + (K .* D_last)^T U
    const float* dl = D + (n - 1) * Cp;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t t = 0; t < n; ++t) KT[i * Cp + t] *= dl[t];
    gemm(K, V, n, KT, Cp, U, V, Sv, V, Start{true, s.cum[n - 1]});
    prefetch_some(pf_step);
  }

  // ---- reverse: dS from the last chunk to the first
  float* dS = s.ds.data();  // the gradient w.r.t. the state at the current chunk's end
  if (bp.d_final_state)
    std::copy(bp.d_final_state + state_row, bp.d_final_state + state_row + KV, dS);
  else
    std::fill(dS, dS + KV, 0.0f);
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t c0 = c * C, n = std::min(C, L.length - c0);
    const float* S0 = &s.starts[c * KV];
    const float* U = &s.ustore[c0 * V];
    float* Q = s.qk.data();
    float* Kc = Q + n * K;
    float* dO = s.odr.data();
    float* dR = dO + n * V;
    load_chunk(c0, n, n);
    pf_next = std::max<int64_t>(0, c0 - C), pf_end = c0, pf_q = true;
    const int64_t pf_step = (C + 7) / 8;
    for (int64_t t = 0; t < n; ++t) {
      s.rq[t] = load_normalized(p, p.q, qk_row(c0 + t), Q + t * K);
      for (int64_t i = 0; i < K; ++i) Q[t * K + i] *= scale;
      load_row(bp.d_output, p.dtype, token(c0 + t) * V, V, dO + t * V);
    }
    const float* beta = s.beta.data();
    const float* P = s.cum.data();
    const float p_last = P[n - 1];
    const float* dl = D + (n - 1) * Cp;
    // [Q; K]^T (K x 2n, row stride 2 Cp), and the Gram matrices [Q; K] K^T (2n x n).
    float* QKT = s.qkt.data();
    transpose(2 * n, K, Q, K, QKT, 2 * Cp);
    float* G = s.gram.data();
    gemm(2 * n, n, K, Q, K, QKT + n, 2 * Cp, G, Cp, kOverwrite);
    prefetch_some(pf_step);
    const float* Gk = G + n * Cp;
    // M (lower with diagonal), M^T, and -A^T (strictly upper) for the back substitution.
    float* M = s.mm.data();
    float* MT = s.mt.data();
    float* AmT = s.am.data();
    float* Am = s.zz.data();  // -A (strictly lower), transposed into AmT
    for (int64_t t = 0; t < n; ++t) {
      const float* d = D + t * Cp;
      const float* gq = G + t * Cp;
      const float* gk = Gk + t * Cp;
      float* m = M + t * Cp;
      float* a = Am + t * Cp;
      const float nb = -beta[t];
      for (int64_t j = 0; j < n; ++j) {
        m[j] = d[j] * gq[j];  // D is zero above the diagonal
        a[j] = nb * d[j] * gk[j];
      }
      a[t] = 0.0f;
    }
    transpose(n, n, M, Cp, MT, Cp);
    transpose(n, n, Am, Cp, AmT, Cp);
    // dU = M^T dO + Kd dS, with Kd = diag(D_last) K.
    float* dU = s.du.data();
    for (int64_t r0 = 0; r0 < n; r0 += kRows)  // row t of M^T is zero before column t
      gemm(std::min(kRows, n - r0), V, n - r0, MT + r0 * Cp + r0, Cp, dO + r0 * V, V, dU + r0 * V,
           V, kOverwrite);
    prefetch_some(pf_step);
    float* Kd = s.kd.data();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < K; ++i) Kd[t * K + i] = dl[t] * Kc[t * K + i];
    gemm(n, V, K, Kd, K, dS, V, dU, V, kAccumulate);
    // dKd = U dS^T: dk_j = D_last,j dKd_j; its gate term sk_j = D_last,j dKd_j . k_j.
    transpose(n, V, U, V, s.ut.data(), Cp);
    float* dK = s.dk.data();
    float* dKdT = s.kdt.data();  // dKd^T = dS U^T (K x n): U^T serves [dM; -dA] below too
    gemm(K, n, V, dS, V, s.ut.data(), Cp, dKdT, Cp, kOverwrite);
    transpose(K, n, dKdT, Cp, dK, K);
    prefetch_some(pf_step);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < K; ++i) dK[t * K + i] *= dl[t];
      s.sk[t] = dot(dK + t * K, Kc + t * K, K);
    }
    // dR = (I + A)^-T dU; dv = beta dR; dbeta starts at dR . v.
    std::copy(dU, dU + n * V, dR);
    substitute_backward(n, AmT, Cp, dR, V);
    prefetch_some(pf_step);
    float* dbeta = s.w.data();  // n floats
    for (int64_t t = 0; t < n; ++t) {
      float* dv = s.du.data() + t * V;  // dU is spent
      for (int64_t j = 0; j < V; ++j) dv[j] = beta[t] * dR[t * V + j];
      store_row(bp.dv, p.dtype, token(c0 + t) * V, V, dv);
      dbeta[t] = dot(dR + t * V, s.v.data() + t * V, V);
    }
    // [dM; -dA] = [dO; dR] U^T and [X; Y] = [dO; dR] S0^T.
    float* dMA = s.dma.data();
    gemm(2 * n, n, V, dO, V, s.ut.data(), Cp, dMA, Cp, kOverwrite);
    prefetch_some(pf_step);
    transpose(K, V, S0, V, s.s0t.data(), K);
    float* XY = s.xy.data();
    gemm(2 * n, K, V, dO, V, s.s0t.data(), K, XY, K, kOverwrite);
    prefetch_some(pf_step);
    // The pairs (t, j): Z_tj = dM_tj M_tj + dA_tj A_tj (j < t) for dg; dMD = dM .* D (in place,
    // for dQ); the dK coefficients [dMD^T | dA' + dA'^T] (n x 2n, row stride 2 Cp).
    float* Z = s.zz.data();
    float* dAp = s.mt.data();  // dA' (strictly lower); M^T is spent
    for (int64_t t = 0; t < n; ++t) {
      float* dm = dMA + t * Cp;
      const float* nda = dMA + (n + t) * Cp;  // -dA_t.
      const float* d = D + t * Cp;
      const float* gk = Gk + t * Cp;
      const float* m = M + t * Cp;
      float* z = Z + t * Cp;
      float* da = dAp + t * Cp;
      const float b = beta[t];
      float db = 0.0f;
      for (int64_t j = 0; j < t; ++j) db -= nda[j] * d[j] * gk[j];
      for (int64_t j = 0; j < n; ++j) {  // zeros above the diagonal come from D
        z[j] = dm[j] * m[j] - nda[j] * b * d[j] * gk[j];
        da[j] = -nda[j] * b * d[j];
        dm[j] *= d[j];
      }
      z[t] = 0.0f, da[t] = 0.0f;  // the diagonal: M's term cancels in dg, A has none
      dbeta[t] += db;
    }
    // CK = [dMD^T | dA' + dA'^T], n x 2n.
    float* CK = s.ck.data();
    transpose(n, n, dMA, Cp, CK, 2 * Cp);
    transpose(n, n, dAp, Cp, CK + n, 2 * Cp);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < n; ++j) CK[t * 2 * Cp + n + j] += dAp[t * Cp + j];
    // dQ = dMD K + diag(P) X; dK += [dMD^T | dA' + dA'^T] [Q; K] - diag(beta P) Y.
    float* dQ = s.dq.data();
    for (int64_t r0 = 0; r0 < n; r0 += kRows) {  // dMD is lower triangular
      const int64_t mr = std::min(kRows, n - r0);
      gemm(mr, K, r0 + mr, dMA + r0 * Cp, Cp, Kc, K, dQ + r0 * K, K, kOverwrite);
    }
    prefetch_some(pf_step);
    for (int64_t r0 = 0; r0 < n; r0 += kRows) {  // dMD^T is upper triangular, dA' + dA'^T full
      const int64_t mr = std::min(kRows, n - r0);
      float* ck = CK + r0 * 2 * Cp;
      gemm(mr, K, n - r0 + n, ck + r0, 2 * Cp, Q + r0 * K, K, dK + r0 * K, K, kAccumulate);
    }
    prefetch_some(pf_step);
    float* dgp = s.dgp.data();  // the gate terms through P_t
    for (int64_t t = 0; t < n; ++t) {
      const float* x = XY + t * K;
      const float* y = XY + (n + t) * K;
      const float bp_t = beta[t] * P[t];
      for (int64_t i = 0; i < K; ++i) {
        dQ[t * K + i] += P[t] * x[i];
        dK[t * K + i] -= bp_t * y[i];
      }
      const float ky = dot(Kc + t * K, y, K);
      dbeta[t] -= P[t] * ky;
      dgp[t] = P[t] * (dot(Q + t * K, x, K) - beta[t] * ky);
    }
    // dg_t: every term carrying e_t. P_last <dS, S0> (all t); sum_{i >= t} dgp_i; sum_{j < t}
    // sk_j; and the pairs i >= t > j, with colacc_j = sum_{i >= t} Z_ij kept as t goes down.
    const float last = p_last * dot(dS, S0, KV);
    float* colacc = s.colacc.data();
    std::fill(colacc, colacc + n, 0.0f);
    float* prefix_k = s.sk.data();  // in place: sum_{j < t} sk_j, summed upwards (no difference)
    float run = 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      const float x = prefix_k[t];
      prefix_k[t] = run;
      run += x;
    }
    float suffix_p = 0.0f;
    for (int64_t t = n - 1; t >= 0; --t) {
      float pairs = 0.0f;
      for (int64_t j = 0; j < t; ++j) {
        colacc[j] += Z[t * Cp + j];
        pairs += colacc[j];
      }
      suffix_p += dgp[t];
      bp.dg[token(c0 + t)] = last + suffix_p + pairs + prefix_k[t];
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t tok = token(c0 + t);
      store_from_float(bp.dbeta, p.dtype, tok, dbeta[t]);
      if (dq_hat) {
        std::copy(dQ + t * K, dQ + (t + 1) * K, dq_hat + tok * K);
        std::copy(dK + t * K, dK + (t + 1) * K, dk_hat + tok * K);
        continue;
      }
      // No GVA: through the norm here, dx = r (dx_hat - x_hat (x_hat . dx_hat)), where
      // x_hat = Q / scale for q (dQ is w.r.t. the scaled q, hence the factor scale).
      float* dq = dQ + t * K;
      float* dk = dK + t * K;
      const float* qt = Q + t * K;
      const float* kt = Kc + t * K;
      const float pq = p.use_qk_l2norm ? dot(qt, dq, K) / (scale * scale) : 0.0f;
      const float pk = p.use_qk_l2norm ? dot(kt, dk, K) : 0.0f;
      const float fq = scale * s.rq[t], fk = s.rk[t];
      for (int64_t i = 0; i < K; ++i) {
        dq[i] = fq * (dq[i] - qt[i] * pq);
        dk[i] = fk * (dk[i] - kt[i] * pk);
      }
      store_row(bp.dq, p.dtype, qk_row(c0 + t) * K, K, dq);
      store_row(bp.dk, p.dtype, qk_row(c0 + t) * K, K, dk);
    }
    // dS0 = P_last dS + [Q; K]^T [diag(P) dO; -diag(beta P) dR].
    for (int64_t t = 0; t < n; ++t) {
      const float fo = P[t], fr = -beta[t] * P[t];
      for (int64_t j = 0; j < V; ++j) {
        dO[t * V + j] *= fo;
        dR[t * V + j] *= fr;
      }
    }
    gemm(K, V, 2 * n, QKT, 2 * Cp, dO, V, dS, V, Start{true, p_last});
  }
  if (bp.dh0) std::copy(dS, dS + KV, bp.dh0 + state_row);
}

}  // namespace

Status chunked_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& bp) {
  return backward_lanes::run_backward(
      bp,
      [&](const Lane& lane, float* dq_hat, float* dk_hat) {
        thread_local Scratch scratch;
        scratch.fit(bp.forward.chunk_size, bp.forward.key_dim, bp.forward.value_dim);
        lane_backward(bp, lane, scratch, dq_hat, dk_hat);
      },
      /*lanes_write_qk=*/true);
}

}  // namespace deltacheck::kernels::cpu
