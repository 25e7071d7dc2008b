// A plain fp32 token recurrence on the raw buffers of a GdrProblem (docs/semantics.md): per
// sequence and value head, S <- exp(g) S; u = beta (v - S^T k); S <- S + k u^T; o = S^T (scale q).
#include "my_kernel.h"

#include <cmath>
#include <vector>

bool my_gated_delta_rule(const deltacheck::GdrProblem& p) {
  if (p.dtype != deltacheck::DType::kF32 || p.num_value_heads % p.num_heads != 0) return false;
  const auto* q = static_cast<const float*>(p.q);
  const auto* k = static_cast<const float*>(p.k);
  const auto* v = static_cast<const float*>(p.v);
  const auto* beta = static_cast<const float*>(p.beta);
  auto* o = static_cast<float*>(p.o);
  const int64_t H = p.num_heads, HV = p.num_value_heads, K = p.key_dim, V = p.value_dim;
  const int64_t T = p.seq_len, group = HV / H;
  std::vector<float> S(K * V), qn(K), kn(K), u(V);
  for (int64_t n = 0; n < p.num_seqs; ++n) {
    const int64_t row = p.cu_seqlens ? 0 : n;
    const int64_t bos = p.cu_seqlens ? p.cu_seqlens[n] : 0;
    const int64_t eos = p.cu_seqlens ? p.cu_seqlens[n + 1] : T;
    for (int64_t h = 0; h < HV; ++h) {
      for (int64_t i = 0; i < K * V; ++i)
        S[i] = p.initial_state ? p.initial_state[(n * HV + h) * K * V + i] : 0.0f;
      for (int64_t t = bos; t < eos; ++t) {
        const int64_t tok = row * T + t;
        const float* qt = q + (tok * H + h / group) * K;
        const float* kt = k + (tok * H + h / group) * K;
        float qss = 0, kss = 0;
        for (int64_t i = 0; i < K; ++i) qss += qt[i] * qt[i], kss += kt[i] * kt[i];
        const float qs = p.use_qk_l2norm ? 1.0f / std::sqrt(qss + 1e-6f) : 1.0f;
        const float ks = p.use_qk_l2norm ? 1.0f / std::sqrt(kss + 1e-6f) : 1.0f;
        for (int64_t i = 0; i < K; ++i) qn[i] = qt[i] * qs * p.scale, kn[i] = kt[i] * ks;
        const float decay = std::exp(p.g[tok * HV + h]), b = beta[tok * HV + h];
        for (float& s : S) s *= decay;
        for (int64_t j = 0; j < V; ++j) {
          float sk = 0;
          for (int64_t i = 0; i < K; ++i) sk += S[i * V + j] * kn[i];
          u[j] = b * (v[(tok * HV + h) * V + j] - sk);
        }
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) S[i * V + j] += kn[i] * u[j];
        for (int64_t j = 0; j < V; ++j) {
          float acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * qn[i];
          o[(tok * HV + h) * V + j] = acc;
        }
      }
      if (p.final_state)
        for (int64_t i = 0; i < K * V; ++i) p.final_state[(n * HV + h) * K * V + i] = S[i];
    }
  }
  return true;
}
