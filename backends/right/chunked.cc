// right:chunked's and right:chunked-lowp's rule: the chunked form. Within a chunk of n tokens
// starting from state S, with chunk-local cumulative gates G_i = g_0 + ... + g_i, the recurrence
// unrolls to
//   S_i = exp(G_i) S + sum_{j<=i} exp(G_i - G_j) k_j u_j^T
//   (I + A) U = beta V - (beta exp(G) K) S,   A_ij = beta_i (k_i . k_j) exp(G_i - G_j), j < i
// so with the UT matrix T = (I + A)^{-1} (forward substitution):
//   w = T (beta exp(G) K),  u = T (beta V),  v_new = u - w S
//   o = scale [ (Q S) exp(G) + (Q K^T (.) exp(G_i - G_j) (.) causal) v_new ]
//   S <- exp(G_last) S + (K (.) exp(G_last - G))^T v_new
// Decay factors come from differences of cumulative sums, which lose digits under strong decay,
// as they do in the kernels that compute this way. A chunk never straddles a sequence boundary:
// a sequence is chunked from its own first token, its last chunk may be short.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/right/rounding.h"
#include "backends/right/rule.h"

namespace deltacheck::backends::right {
namespace {

template <typename T>
void chunked_pass(const HeadSequence<T>& s, int64_t length, T* S, T* o, cases::DType operands,
                  const ChunkChoices& choices) {
  const int64_t K = s.K, V = s.V, C = choices.chunk;
  auto r = [operands](T x) { return round_to(x, operands); };
  std::vector<T> q(C * K), k(C * K), kT(K * C), kb(C * K), A(C * C), UT(C * C), w(C * K), u(C * V),
      vn(C * V), Sr(K * V), G(C), row(std::max(K, V));
  for (int64_t begin = 0; begin < length; begin += C) {
    const int64_t n = std::min(C, length - begin);
    const T* beta = s.beta + begin;
    for (int64_t i = 0; i < n * K; ++i) q[i] = r(s.q[begin * K + i]), k[i] = r(s.k[begin * K + i]);
    if (choices.independent_cumsum) {
      double sum = 0;  // each G_i rounded to T once, from the sum in double
      for (int64_t i = 0; i < n; ++i) G[i] = static_cast<T>(sum += double(s.g[begin + i]));
    } else {
      G[0] = s.g[begin];
      for (int64_t i = 1; i < n; ++i) G[i] = G[i - 1] + s.g[begin + i];
    }
    // A = strictly-lower(diag(beta) K K^T (.) decay); rows accumulate over the key dim against
    // the transposed keys kT [K, C], so the inner loops run along a row.
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < K; ++c) kT[c * C + j] = k[j * K + c];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < K; ++c) kb[i * K + c] = r(beta[i] * k[i * K + c]);
    for (int64_t i = 0; i < n; ++i) {
      T* a = &A[i * C];
      std::fill(a, a + i, T(0));
      for (int64_t c = 0; c < K; ++c) {
        const T x = kb[i * K + c];
        for (int64_t j = 0; j < i; ++j) a[j] += x * kT[c * C + j];
      }
      for (int64_t j = 0; j < i; ++j) a[j] *= std::exp(G[i] - G[j]);
    }
    // UT = (I + A)^{-1}, unit lower triangular: row i = e_i - sum_{m<i} A_im UT_m
    for (int64_t i = 0; i < n; ++i) {
      T* t = &UT[i * C];
      std::fill(t, t + i, T(0));
      for (int64_t m = 0; m < i; ++m) {
        const T a = A[i * C + m];
        if (choices.lowp_solve) {  // the planted bug: the substitution carried in the activation dtype
          for (int64_t j = 0; j <= m; ++j) t[j] = r(t[j] - r(a) * UT[m * C + j]);
          continue;
        }
        for (int64_t j = 0; j <= m; ++j) t[j] -= a * UT[m * C + j];
      }
      t[i] = 1;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) UT[i * C + j] = r(UT[i * C + j]);
    // w = UT (beta exp(G) K), u = UT (beta V); kb and vn hold the right-hand operands
    for (int64_t j = 0; j < n; ++j) {
      const T bg = beta[j] * std::exp(G[j]);
      for (int64_t c = 0; c < K; ++c) kb[j * K + c] = r(bg * k[j * K + c]);
      for (int64_t c = 0; c < V; ++c) vn[j * V + c] = r(beta[j] * s.v[(begin + j) * V + c]);
    }
    for (int64_t i = 0; i < n; ++i) {
      std::fill(w.begin() + i * K, w.begin() + (i + 1) * K, T(0));
      std::fill(u.begin() + i * V, u.begin() + (i + 1) * V, T(0));
      for (int64_t j = 0; j <= i; ++j) {
        const T t = UT[i * C + j];
        for (int64_t c = 0; c < K; ++c) w[i * K + c] += t * kb[j * K + c];
        for (int64_t c = 0; c < V; ++c) u[i * V + c] += t * vn[j * V + c];
      }
    }
    // v_new = u - w S, with the state as a matmul operand
    for (int64_t i = 0; i < K * V; ++i) Sr[i] = r(S[i]);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < V; ++c) vn[i * V + c] = r(u[i * V + c]);
      for (int64_t m = 0; m < K; ++m) {
        const T wm = r(w[i * K + m]);
        for (int64_t c = 0; c < V; ++c) vn[i * V + c] -= wm * Sr[m * V + c];
      }
    }
    for (int64_t i = 0; i < n * V; ++i) vn[i] = r(vn[i]);
    // o = scale [ (Q S) exp(G) + (Q K^T (.) decay (.) causal) v_new ]
    for (int64_t i = 0; i < n; ++i) {
      T* oi = o + (begin + i) * V;
      for (int64_t c = 0; c < V; ++c) oi[c] = 0;
      for (int64_t m = 0; m < K; ++m)
        for (int64_t c = 0; c < V; ++c) oi[c] += q[i * K + m] * Sr[m * V + c];
      const T gi = std::exp(G[i]);
      for (int64_t c = 0; c < V; ++c) oi[c] *= gi;
      T* qk = &A[i * C];  // A's row i is no longer needed: Q K^T row i, then its decay
      std::fill(qk, qk + i + 1, T(0));
      for (int64_t m = 0; m < K; ++m) {
        const T x = q[i * K + m];
        for (int64_t j = 0; j <= i; ++j) qk[j] += x * kT[m * C + j];
      }
      for (int64_t c = 0; c < V; ++c) row[c] = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const T a = r(qk[j] * std::exp(G[i] - G[j]));
        for (int64_t c = 0; c < V; ++c) row[c] += a * vn[j * V + c];
      }
      for (int64_t c = 0; c < V; ++c) oi[c] = s.scale * (oi[c] + row[c]);
    }
    // S <- exp(G_last) S + (K (.) exp(G_last - G))^T v_new, the state itself in T
    const T last = G[n - 1], decay = std::exp(last);
    for (int64_t i = 0; i < K * V; ++i) S[i] *= decay;
    for (int64_t j = 0; j < n; ++j) {
      const T d = std::exp(last - G[j]);
      for (int64_t m = 0; m < K; ++m) {
        const T km = r(k[j * K + m] * d);
        for (int64_t c = 0; c < V; ++c) S[m * V + c] += km * vn[j * V + c];
      }
    }
  }
}

}  // namespace

template <typename T>
void chunked_rule(const HeadSequence<T>& s, T* S, T* o, T* token_states, cases::DType operands,
                  ChunkChoices choices) {
  if (token_states) {
    // Each draft prefix is its own chunked call from the same initial state.
    const int64_t per = s.K * s.V;
    std::vector<T> prefix(static_cast<size_t>(per)), scratch(static_cast<size_t>(s.length * s.V));
    for (int64_t p = 1; p < s.length; ++p) {
      std::copy(S, S + per, prefix.begin());
      chunked_pass(s, p, prefix.data(), scratch.data(), operands, choices);
      std::copy(prefix.begin(), prefix.end(), token_states + (p - 1) * per);
    }
  }
  chunked_pass(s, s.length, S, o, operands, choices);
  if (token_states && s.length > 0)
    std::copy(S, S + s.K * s.V, token_states + (s.length - 1) * s.K * s.V);
}

template void chunked_rule<float>(const HeadSequence<float>&, float*, float*, float*, cases::DType,
                                  ChunkChoices);
template void chunked_rule<double>(const HeadSequence<double>&, double*, double*, double*,
                                   cases::DType, ChunkChoices);

}  // namespace deltacheck::backends::right
