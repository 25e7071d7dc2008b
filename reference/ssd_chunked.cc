// The chunked SSD form in compute type T, as mamba_ssm's mamba_chunk_scan_combined and vLLM's SSD
// kernels compute it (chunk 256 by default; 64 and 128 in other kernels). Per chunk of a sequence
// (chunks restart at each sequence), with dA_cs the chunk-local running sum of dt A:
//   y_i  = sum_{j<=i} (C_i . B_j) exp(dA_cs_i - dA_cs_j) dt_j x_j      (intra-chunk, segment sums)
//        + exp(dA_cs_i) S C_i                                        (inter-chunk, from the state)
//   S   <- exp(dA_cs_last) S + sum_j x_j (B_j exp(dA_cs_last - dA_cs_j) dt_j)^T
// then y = (y + D x) silu(z). With `operands` set, what a tensor-core kernel reads as a matmul
// operand is rounded to it: C, B, x, the scaled C B^T, the state read by C, the scaled B.
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/ssd.h"

namespace deltacheck::reference {
namespace {

template <typename T>
SsdResult chunked(const SsdArgs& a, const SsdArithmetic& how) {
  const int64_t H = a.num_heads, P = a.head_dim, G = a.num_groups, N = a.state_dim;
  const int64_t chunk = how.chunk_size;
  const Rounding op = how.operands;
  return ssd_detail::for_each_lane<T>(a, [&](const ssd_detail::Lane& L, int64_t g,
                                             std::vector<T>& S, SsdResult& r) {
    const T A = static_cast<T>(a.A[L.head]);
    std::vector<T> dt(chunk), cs(chunk), b(chunk * N), c(chunk * N), x(chunk * P), acc(chunk * P);
    std::vector<T> Sop(P * N), w(chunk);
    for (int64_t c0 = L.begin; c0 < L.begin + L.length; c0 += chunk) {
      const int64_t len = std::min(chunk, L.begin + L.length - c0);
      T run = T(0);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t tok = L.row * a.seq_len + c0 + i;
        dt[i] = ssd_detail::step<T>(a, a.dt[tok * H + L.head], L.head, how.softplus_log_exp);
        run += dt[i] * A;
        cs[i] = run;
        for (int64_t n = 0; n < N; ++n) {
          b[i * N + n] = round_to(op, static_cast<T>(a.Bm[(tok * G + g) * N + n]));
          c[i * N + n] = round_to(op, static_cast<T>(a.Cm[(tok * G + g) * N + n]));
        }
        for (int64_t p = 0; p < P; ++p)
          x[i * P + p] = round_to(op, static_cast<T>(a.x[(tok * H + L.head) * P + p]));
      }
      for (int64_t i = 0; i < P * N; ++i) Sop[i] = round_to(op, S[i]);
      for (int64_t i = 0; i < len; ++i) {
        T* yi = acc.data() + i * P;
        // inter-chunk: exp(dA_cs_i) (S C_i)
        const T scale = std::exp(cs[i]);
        for (int64_t p = 0; p < P; ++p) {
          T s = T(0);
          for (int64_t n = 0; n < N; ++n) s += Sop[p * N + n] * c[i * N + n];
          yi[p] = s * scale;
        }
        // intra-chunk: the scaled C B^T row times x
        for (int64_t j = 0; j <= i; ++j) {
          T cb = T(0);
          for (int64_t n = 0; n < N; ++n) cb += c[i * N + n] * b[j * N + n];
          w[j] = round_to(op, T(cb * std::exp(cs[i] - cs[j]) * dt[j]));
        }
        for (int64_t p = 0; p < P; ++p) {
          T s = T(0);
          for (int64_t j = 0; j <= i; ++j) s += w[j] * x[j * P + p];
          yi[p] += s;
        }
        const int64_t xo = ((L.row * a.seq_len + c0 + i) * H + L.head) * P;
        for (int64_t p = 0; p < P; ++p)
          r.y[xo + p] = ssd_detail::finish<T>(a, yi[p], L.head, xo + p, how.output);
      }
      // the chunk's state: exp(dA_last) S + x^T (B exp(dA_last - dA_cs) dt)
      const T last = cs[len - 1], carry = std::exp(last);
      for (int64_t j = 0; j < len; ++j) {
        const T f = std::exp(last - cs[j]) * dt[j];
        for (int64_t n = 0; n < N; ++n) b[j * N + n] = round_to(op, T(b[j * N + n] * f));
      }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          T s = T(0);
          for (int64_t j = 0; j < len; ++j) s += x[j * P + p] * b[j * N + n];
          S[p * N + n] = carry * S[p * N + n] + s;
        }
    }
  });
}

}  // namespace

SsdResult ssd_chunked(const SsdArgs& a, const SsdArithmetic& how) {
  return how.fp32 ? chunked<float>(a, how) : chunked<double>(a, how);
}

}  // namespace deltacheck::reference
