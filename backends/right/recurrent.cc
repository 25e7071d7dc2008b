// right:recurrent's rule: the token recurrence, in the order docs/semantics.md gives it
//   S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t)
#include <cmath>
#include <vector>

#include "backends/right/rounding.h"
#include "backends/right/rule.h"

namespace deltacheck::backends::right {

template <typename T>
void l2_normalize(T* x, int64_t n) {
  T ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const T inv = T(1) / std::sqrt(ss + T(1e-6));
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

template <typename T>
void recurrent_rule(const HeadSequence<T>& s, T* S, T* o, T* token_states) {
  const int64_t K = s.K, V = s.V;
  std::vector<T> q(static_cast<size_t>(K)), kS(static_cast<size_t>(V));
  for (int64_t t = 0; t < s.length; ++t) {
    const T* k = s.k + t * K;
    const T* v = s.v + t * V;
    const T decay = std::exp(s.g[t]);
    for (int64_t i = 0; i < K * V; ++i) S[i] *= decay;
    // kS = S^T k
    for (int64_t j = 0; j < V; ++j) kS[j] = 0;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) kS[j] += k[i] * S[i * V + j];
    // u = beta (v - S^T k), kept in kS; S += k u^T
    for (int64_t j = 0; j < V; ++j) kS[j] = s.beta[t] * (v[j] - kS[j]);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * kS[j];
    // o_t = S^T (scale q_t)
    for (int64_t i = 0; i < K; ++i) q[i] = s.scale * s.q[t * K + i];
    T* ot = o + t * V;
    for (int64_t j = 0; j < V; ++j) ot[j] = 0;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) ot[j] += q[i] * S[i * V + j];
    if (token_states)
      for (int64_t i = 0; i < K * V; ++i) token_states[t * K * V + i] = S[i];
  }
}

template <typename T>
void l2_normalize_in(T* x, int64_t n, cases::DType dtype) {
  T ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += round_to(T(x[i] * x[i]), dtype);
  const T denominator = round_to(T(round_to(ss, dtype) + T(1e-6)), dtype);
  const T inv = round_to(T(T(1) / std::sqrt(denominator)), dtype);
  for (int64_t i = 0; i < n; ++i) x[i] = round_to(T(x[i] * inv), dtype);
}

template void l2_normalize_in<float>(float*, int64_t, cases::DType);
template void l2_normalize_in<double>(double*, int64_t, cases::DType);
template void l2_normalize<float>(float*, int64_t);
template void l2_normalize<double>(double*, int64_t);
template void recurrent_rule<float>(const HeadSequence<float>&, float*, float*, float*);
template void recurrent_rule<double>(const HeadSequence<double>&, double*, double*, double*);

}  // namespace deltacheck::backends::right
