// The toy kernel: per sequence and value head, per token:
//   S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T (scale q)
// with q and k L2-normalized first when asked.
#include "toy_gdr.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace toy {
namespace {

float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {  // round to nearest even, as hardware converts
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float load(const void* p, Precision t, int64_t i) {
  return t == Precision::kF32 ? static_cast<const float*>(p)[i]
                              : bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}

void store(void* p, Precision t, int64_t i, float x) {
  if (t == Precision::kF32)
    static_cast<float*>(p)[i] = x;
  else
    static_cast<uint16_t*>(p)[i] = float_to_bf16(x);
}

// Loads a q or k row, normalized when asked.
void load_row(const void* p, const GdrArgs& a, int64_t token, int64_t head, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < a.key_dim; ++i) {
    out[i] = load(p, a.precision, (token * a.heads + head) * a.key_dim + i);
    ss += out[i] * out[i];
  }
  if (!a.l2norm) return;
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < a.key_dim; ++i) out[i] *= inv;
}

bool run(const GdrArgs& a, bool carry_across_sequences) {
  if (a.heads <= 0 || a.value_heads % a.heads != 0 || (a.cu_seqlens && a.batch != 1)) return false;
  const int64_t K = a.key_dim, V = a.value_dim, HV = a.value_heads;
  const int64_t n = a.cu_seqlens ? a.num_seqs : a.batch;
  const float scale = a.scale > 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(K));
  std::vector<float> S(K * V), q(K), k(K), u(V);
  for (int64_t hv = 0; hv < HV; ++hv) {
    const int64_t h = hv / (HV / a.heads);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t begin = a.cu_seqlens ? a.cu_seqlens[s] : s * a.seq_len;
      const int64_t end = a.cu_seqlens ? a.cu_seqlens[s + 1] : (s + 1) * a.seq_len;
      // The leaky variant treats the packed row as one stream: S still holds the state sequence
      // s - 1 ended with. (Rows of a batch stay separate, as they do in the real bug.)
      if (!(carry_across_sequences && a.cu_seqlens && s > 0)) {
        if (a.initial_state)
          std::memcpy(S.data(), a.initial_state + (s * HV + hv) * K * V, K * V * sizeof(float));
        else
          std::fill(S.begin(), S.end(), 0.0f);
      }
      for (int64_t t = begin; t < end; ++t) {
        load_row(a.q, a, t, h, q.data());
        load_row(a.k, a, t, h, k.data());
        const float decay = std::exp(a.g[t * HV + hv]);
        const float beta = load(a.beta, a.precision, t * HV + hv);
        for (float& x : S) x *= decay;
        for (int64_t j = 0; j < V; ++j) {
          float kv = 0.0f;
          for (int64_t i = 0; i < K; ++i) kv += S[i * V + j] * k[i];
          u[j] = beta * (load(a.v, a.precision, (t * HV + hv) * V + j) - kv);
        }
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * u[j];
        for (int64_t j = 0; j < V; ++j) {
          float o = 0.0f;
          for (int64_t i = 0; i < K; ++i) o += S[i * V + j] * (scale * q[i]);
          store(a.o, a.precision, (t * HV + hv) * V + j, o);
        }
      }
      if (a.final_state)
        std::memcpy(a.final_state + (s * HV + hv) * K * V, S.data(), K * V * sizeof(float));
    }
  }
  return true;
}

}  // namespace

bool recurrent_gdr(const GdrArgs& a) { return run(a, false); }
bool leaky_recurrent_gdr(const GdrArgs& a) { return run(a, true); }

}  // namespace toy
