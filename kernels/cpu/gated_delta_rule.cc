// CPU gated delta rule: chunked WY form and plain recurrence, fp32 accumulation.
#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace deltacheck::kernels::cpu {
namespace {

struct Lane {
  int64_t row, begin, length, seq, head;
  int32_t slot;
};

Status check(const GatedDeltaRuleParams& p) {
  if (p.batch < 1 || p.seq_len < 0) return Status::InvalidArgument("batch must be >= 1, T >= 0");
  if (p.num_heads < 1 || p.num_value_heads < 1 || p.key_dim < 1 || p.value_dim < 1)
    return Status::InvalidArgument("head counts and head dims must be >= 1");
  if (p.num_value_heads % p.num_heads != 0) return Status::InvalidArgument("HV % H != 0");
  if (!p.q || !p.k || !p.v || !p.g || !p.beta || !p.o)
    return Status::InvalidArgument("q, k, v, g, beta and o are required");
  if (p.chunk_size < 1) return Status::InvalidArgument("chunk_size must be >= 1");
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens requires batch == 1");
    if (p.num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
    if (p.cu_seqlens[0] != 0) return Status::InvalidArgument("cu_seqlens[0] must be 0");
    if (p.cu_seqlens[p.num_seqs] != p.seq_len)
      return Status::InvalidArgument("cu_seqlens must end at T");
    for (int64_t i = 0; i < p.num_seqs; ++i)
      if (p.cu_seqlens[i + 1] < p.cu_seqlens[i])
        return Status::InvalidArgument("cu_seqlens decreases at " + std::to_string(i + 1));
  }
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
  if (p.state_slots)
    for (int64_t i = 0; i < n; ++i)
      if (p.state_slots[i] >= rows)
        return Status::InvalidArgument("state slot " + std::to_string(p.state_slots[i]) +
                                       " of sequence " + std::to_string(i) + " >= rows " +
                                       std::to_string(rows));
  return Status::Ok();
}

std::vector<Lane> make_lanes(const GatedDeltaRuleParams& p) {
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  std::vector<Lane> lanes;
  lanes.reserve(static_cast<size_t>(n * p.num_value_heads));
  for (int64_t s = 0; s < n; ++s) {
    const int32_t slot = p.state_slots ? p.state_slots[s] : static_cast<int32_t>(s);
    if (slot < 0) continue;  // padding entry
    const int64_t row = p.cu_seqlens ? 0 : s;
    const int64_t begin = p.cu_seqlens ? p.cu_seqlens[s] : 0;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[s + 1] - p.cu_seqlens[s] : p.seq_len;
    for (int64_t h = 0; h < p.num_value_heads; ++h) lanes.push_back({row, begin, len, s, h, slot});
  }
  // Longest lanes first, so the tail of the schedule is short work.
  std::stable_sort(lanes.begin(), lanes.end(),
                   [](const Lane& a, const Lane& b) { return a.length > b.length; });
  return lanes;
}

// Loads q or k of one token into dst (fp32), with the optional L2 norm and a factor.
void load_qk(const GatedDeltaRuleParams& p, const void* src, int64_t row, int64_t t, int64_t head,
             float factor, float* dst) {
  const int64_t K = p.key_dim;
  const int64_t base = ((row * p.seq_len + t) * p.num_heads + head) * K;
  for (int64_t i = 0; i < K; ++i) dst[i] = load_as_float(src, p.dtype, base + i);
  float inv = 1.0f;
  if (p.use_qk_l2norm) {
    float ss = 0.0f;
    for (int64_t i = 0; i < K; ++i) ss += dst[i] * dst[i];
    inv = 1.0f / std::sqrt(ss + 1e-6f);
  }
  const float f = inv * factor;
  for (int64_t i = 0; i < K; ++i) dst[i] *= f;
}

float resolved_scale(const GatedDeltaRuleParams& p) {
  return p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.key_dim));
}

void load_state(const GatedDeltaRuleParams& p, const Lane& L, float* S) {
  const int64_t KV = p.key_dim * p.value_dim;
  if (p.initial_state) {
    const float* s0 =
        p.initial_state + (static_cast<int64_t>(L.slot) * p.num_value_heads + L.head) * KV;
    for (int64_t i = 0; i < KV; ++i) S[i] = s0[i];
  } else {
    for (int64_t i = 0; i < KV; ++i) S[i] = 0.0f;
  }
}

void store_state(const GatedDeltaRuleParams& p, const Lane& L, const float* S) {
  if (!p.final_state) return;
  const int64_t KV = p.key_dim * p.value_dim;
  float* out = p.final_state + (static_cast<int64_t>(L.slot) * p.num_value_heads + L.head) * KV;
  for (int64_t i = 0; i < KV; ++i) out[i] = S[i];
}

// Scratch for one lane's chunk, reused across chunks.
struct ChunkScratch {
  std::vector<float> q, k, v, g, graw, beta, kk, qk, w, qs, u, state;
  ChunkScratch(int64_t C, int64_t K, int64_t V) { resize(C, K, V); }
  void resize(int64_t C, int64_t K, int64_t V) {
    auto fit = [](std::vector<float>& x, int64_t n) { x.resize(static_cast<size_t>(n)); };
    fit(q, C * K), fit(k, C * K), fit(v, C * V), fit(g, C), fit(graw, C), fit(beta, C),
        fit(kk, C * C);
    fit(qk, C * C), fit(w, C * V), fit(qs, C * V), fit(u, C * V), fit(state, K * V);
  }
};

void chunked_lane(const GatedDeltaRuleParams& p, const Lane& L, ChunkScratch& s) {
  const int64_t K = p.key_dim, V = p.value_dim, C = p.chunk_size;
  const int64_t HV = p.num_value_heads;
  const int64_t qk_head = L.head / (HV / p.num_heads);
  const float scale = resolved_scale(p);
  float* S = s.state.data();
  load_state(p, L, S);

  for (int64_t c0 = 0; c0 < L.length; c0 += C) {
    const int64_t n = std::min(C, L.length - c0);
    float cum = 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = L.begin + c0 + t;
      const int64_t tok = (L.row * p.seq_len + pos) * HV + L.head;
      load_qk(p, p.q, L.row, pos, qk_head, scale, &s.q[t * K]);
      load_qk(p, p.k, L.row, pos, qk_head, 1.0f, &s.k[t * K]);
      for (int64_t j = 0; j < V; ++j) s.v[t * V + j] = load_as_float(p.v, p.dtype, tok * V + j);
      s.graw[t] = p.g[tok];
      cum += p.g[tok];
      s.g[t] = cum;
      s.beta[t] = load_as_float(p.beta, p.dtype, tok);
    }
    // Gram matrices: kk[t][j] = beta_t exp(G_t - G_j) k_t.k_j (j < t), qk[t][j] = exp(G_t - G_j)
    // q_t.k_j (j <= t). Decay ratios only ever for j <= t: exp of a non-positive number, never
    // 0*inf. The exponent G_t - G_j is summed over tokens j+1..t directly rather than as a
    // difference of two cumulative sums, which would lose |G| * eps to cancellation under strong
    // decay.
    for (int64_t t = 0; t < n; ++t) {
      const float* kt = &s.k[t * K];
      const float* qt = &s.q[t * K];
      float log_decay = 0.0f;
      for (int64_t j = t; j >= 0; --j) {
        if (j < t) log_decay += s.graw[j + 1];
        const float* kj = &s.k[j * K];
        float dk = 0.0f, dq = 0.0f;
        for (int64_t i = 0; i < K; ++i) {
          dk += kt[i] * kj[i];
          dq += qt[i] * kj[i];
        }
        const float d = std::exp(log_decay);
        s.kk[t * C + j] = s.beta[t] * d * dk;
        s.qk[t * C + j] = d * dq;
      }
    }
    // w = K S0, qs = Q S0 (row of S reused across the chunk while in L1).
    std::fill(s.w.begin(), s.w.begin() + n * V, 0.0f);
    std::fill(s.qs.begin(), s.qs.begin() + n * V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
      const float* Si = S + i * V;
      for (int64_t t = 0; t < n; ++t) {
        const float kv = s.k[t * K + i], qv = s.q[t * K + i];
        float* wt = &s.w[t * V];
        float* qt = &s.qs[t * V];
        for (int64_t j = 0; j < V; ++j) {
          wt[j] += kv * Si[j];
          qt[j] += qv * Si[j];
        }
      }
    }
    // u_t = beta_t (v_t - exp(G_t) w_t) - sum_{j<t} A_tj u_j  (forward substitution)
    for (int64_t t = 0; t < n; ++t) {
      const float eg = std::exp(s.g[t]);
      const float b = s.beta[t];
      float* ut = &s.u[t * V];
      const float* vt = &s.v[t * V];
      const float* wt = &s.w[t * V];
      for (int64_t j = 0; j < V; ++j) ut[j] = b * (vt[j] - eg * wt[j]);
      for (int64_t m = 0; m < t; ++m) {
        const float a = s.kk[t * C + m];
        const float* um = &s.u[m * V];
        for (int64_t j = 0; j < V; ++j) ut[j] -= a * um[j];
      }
    }
    // o_t = exp(G_t) qs_t + sum_{m<=t} qk_tm u_m
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = L.begin + c0 + t;
      const int64_t tok = (L.row * p.seq_len + pos) * HV + L.head;
      const float eg = std::exp(s.g[t]);
      float* acc = &s.w[t * V];  // w_t is no longer needed: reuse it as the accumulator
      const float* qst = &s.qs[t * V];
      for (int64_t j = 0; j < V; ++j) acc[j] = eg * qst[j];
      for (int64_t m = 0; m <= t; ++m) {
        const float a = s.qk[t * C + m];
        const float* um = &s.u[m * V];
        for (int64_t j = 0; j < V; ++j) acc[j] += a * um[j];
      }
      for (int64_t j = 0; j < V; ++j) store_from_float(p.o, p.dtype, tok * V + j, acc[j]);
    }
    // S = exp(G_last) S + sum_m exp(G_last - G_m) k_m u_m^T
    const float elast = std::exp(s.g[n - 1]);
    float tail = 0.0f;  // sum of g over tokens m+1..n-1, accumulated from the chunk's end
    for (int64_t m = n - 1; m >= 0; --m) {
      s.g[m] = std::exp(tail);  // g now holds the weights exp(G_last - G_m)
      tail += s.graw[m];
    }
    for (int64_t i = 0; i < K; ++i) {
      float* Si = S + i * V;
      for (int64_t j = 0; j < V; ++j) Si[j] *= elast;
      for (int64_t m = 0; m < n; ++m) {
        const float a = s.g[m] * s.k[m * K + i];
        const float* um = &s.u[m * V];
        for (int64_t j = 0; j < V; ++j) Si[j] += a * um[j];
      }
    }
  }
  store_state(p, L, S);
}

void recurrent_lane(const GatedDeltaRuleParams& p, const Lane& L, std::vector<float>& scratch) {
  const int64_t K = p.key_dim, V = p.value_dim, HV = p.num_value_heads;
  const int64_t qk_head = L.head / (HV / p.num_heads);
  const float scale = resolved_scale(p);
  float* S = scratch.data();
  float* q = S + K * V;
  float* k = q + K;
  float* u = k + K;
  load_state(p, L, S);
  for (int64_t t = L.begin; t < L.begin + L.length; ++t) {
    const int64_t tok = (L.row * p.seq_len + t) * HV + L.head;
    load_qk(p, p.q, L.row, t, qk_head, scale, q);
    load_qk(p, p.k, L.row, t, qk_head, 1.0f, k);
    const float decay = std::exp(p.g[tok]);
    const float beta = load_as_float(p.beta, p.dtype, tok);
    for (int64_t i = 0; i < K * V; ++i) S[i] *= decay;
    for (int64_t j = 0; j < V; ++j) u[j] = 0.0f;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) u[j] += S[i * V + j] * k[i];
    for (int64_t j = 0; j < V; ++j) u[j] = beta * (load_as_float(p.v, p.dtype, tok * V + j) - u[j]);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * u[j];
    // o = S^T q, accumulated in u's place after u is consumed would alias: use a second pass.
    for (int64_t j = 0; j < V; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * q[i];
      store_from_float(p.o, p.dtype, tok * V + j, acc);
    }
  }
  store_state(p, L, S);
}

}  // namespace

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  const std::vector<Lane> lanes = make_lanes(p);
  parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads, [&](int64_t i) {
    thread_local ChunkScratch scratch(0, 0, 0);
    scratch.resize(p.chunk_size, p.key_dim, p.value_dim);
    chunked_lane(p, lanes[i], scratch);
  });
  return Status::Ok();
}

Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  const std::vector<Lane> lanes = make_lanes(p);
  const int64_t K = p.key_dim, V = p.value_dim;
  parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads, [&](int64_t i) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(K * V + 2 * K + V));
    recurrent_lane(p, lanes[i], scratch);
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
