// CPU gated delta rule: chunked WY form and plain recurrence, fp32 accumulation.
#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/chunk_gemm.h"
#include "kernels/cpu/recurrent_step.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
Status check_gated_delta_rule_params(const GatedDeltaRuleParams& p) {
  if (p.batch < 1 || p.seq_len < 0) return Status::InvalidArgument("batch must be >= 1, T >= 0");
  if (Status st = check_dtype(p.dtype, "q, k, v, beta and o"); !st.ok()) return st;
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

namespace {

using chunk_gemm::gemm, chunk_gemm::kRows, chunk_gemm::Start, chunk_gemm::kOverwrite,
    chunk_gemm::kAccumulate, chunk_gemm::round_up;  // kernels/cpu/chunk_gemm.h

struct Lane {
  int64_t row, begin, length, seq, head;
  int32_t slot;
};

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

// sum of x[i]^2 with 16 partial sums, so the loop vectorizes without reassociation flags.
float sum_squares(const float* x, int64_t n) {
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) part[l] += x[i + l] * x[i + l];
  float s = 0.0f;
  for (; i < n; ++i) s += x[i] * x[i];
  for (int l = 0; l < 16; ++l) s += part[l];
  return s;
}

// Loads q or k of one token into dst (fp32), with the optional L2 norm and a factor.
void load_qk(const GatedDeltaRuleParams& p, const void* src, int64_t row, int64_t t, int64_t head,
             float factor, float* dst) {
  const int64_t K = p.key_dim;
  load_row(src, p.dtype, ((row * p.seq_len + t) * p.num_heads + head) * K, K, dst);
  float inv = 1.0f;
  if (p.use_qk_l2norm) inv = 1.0f / std::sqrt(sum_squares(dst, K) + 1e-6f);
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

// Scratch for one lane's chunk, reused across chunks and lanes of a thread. Row strides of the
// chunk x chunk matrices (and of the transposed keys) are padded to 16 floats.
struct ChunkScratch {
  int64_t C = 0, Cp = 0, K = 0, V = 0;
  std::vector<float> q, k, kt, kwt, aqk, akk, w, qs, u, state, decay, cumdecay, beta, drow;
  void resize(int64_t C_, int64_t K_, int64_t V_) {
    if (C_ == C && K_ == K && V_ == V) return;
    C = C_, K = K_, V = V_, Cp = round_up(C_, 16);
    auto fit = [](std::vector<float>& x, int64_t n) { x.assign(static_cast<size_t>(n), 0.0f); };
    fit(q, C * K), fit(k, C * K), fit(kt, K * Cp), fit(kwt, K * Cp), fit(aqk, C * Cp);
    fit(akk, C * Cp), fit(w, C * V), fit(qs, C * V), fit(u, C * V), fit(state, K * V);
    fit(decay, C), fit(cumdecay, C), fit(beta, C), fit(drow, Cp);
  }
};

// Where one token's rows of q, k (head qk_head), v and o (the lane's value head) live.
struct TokenRows {
  const char *q, *k, *v, *o;
  int64_t qk_bytes, v_bytes;
};

TokenRows token_rows(const GatedDeltaRuleParams& p, const Lane& L, int64_t qk_head, int64_t t) {
  const int64_t es = dtype_size(p.dtype);
  const int64_t qk_bytes = p.key_dim * es, v_bytes = p.value_dim * es;
  const int64_t qk_row = (L.row * p.seq_len + t) * p.num_heads + qk_head;
  const int64_t v_row = (L.row * p.seq_len + t) * p.num_value_heads + L.head;
  return {static_cast<const char*>(p.q) + qk_row * qk_bytes,
          static_cast<const char*>(p.k) + qk_row * qk_bytes,
          static_cast<const char*>(p.v) + v_row * v_bytes,
          static_cast<const char*>(p.o) + v_row * v_bytes,
          qk_bytes,
          v_bytes};
}

// One (sequence, head) lane in chunks. Within a chunk of n tokens starting from state S0, with
// e_t = exp(g_t), P_t = e_0 ... e_t and D_tj = e_{j+1} ... e_t (j <= t; products, never a
// quotient of cumulative decays, so nothing overflows where a tail chunk decays strongly):
//   (I + A) U = diag(beta) (V - diag(P) K S0),    A_tj = beta_t D_tj k_t.k_j     (j < t)
//   O = diag(P) Q S0 + (D .* Q K^T)_{j <= t} U
//   S_end = P_last S0 + (K .* D_last)^T U
// U by blocked forward substitution; every other step is one gemm() call.
// Block b's row of the checkpoint pool for lane L (nullptr: not written).
float* checkpoint_row(const GatedDeltaRuleParams& p, const StateCheckpoints& ck, const Lane& L,
                      int64_t b) {
  const int32_t row = ck.block_slots[L.seq * ck.max_blocks + b];
  if (row < 0) return nullptr;
  return ck.pool +
         (static_cast<int64_t>(row) * p.num_value_heads + L.head) * p.key_dim * p.value_dim;
}

void chunked_lane(const GatedDeltaRuleParams& p, const Lane& L, ChunkScratch& s,
                  const StateCheckpoints* ck) {
  const int64_t K = p.key_dim, V = p.value_dim, C = p.chunk_size, Cp = s.Cp;
  const int64_t HV = p.num_value_heads;
  const int64_t qk_head = L.head / (HV / p.num_heads);
  const float scale = resolved_scale(p);
  float* S = s.state.data();
  load_state(p, L, S);
  // Without an initial state the first chunk starts from exact zeros: K S0 and Q S0 are zero and
  // need no product (many short sequences are mostly first chunks).
  bool zero_state = p.initial_state == nullptr;

  for (int64_t c0 = 0, n = 0; c0 < L.length; c0 += n) {
    n = std::min(C, L.length - c0);
    if (ck)
      n = std::min(n, (c0 / ck->block_size + 1) * ck->block_size - c0);     // stop at a block end
    const int64_t tok0 = (L.row * p.seq_len + L.begin + c0) * HV + L.head;  // token 0, this head
    float* Q = s.q.data();
    float* Kc = s.k.data();
    float* U = s.u.data();
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = L.begin + c0 + t;
      const int64_t tok = tok0 + t * HV;
      load_qk(p, p.q, L.row, pos, qk_head, scale, Q + t * K);
      load_qk(p, p.k, L.row, pos, qk_head, 1.0f, Kc + t * K);
      load_row(p.v, p.dtype, tok * V, V, U + t * V);  // v_t, turned into u_t below
      s.decay[t] = std::exp(p.g[tok]);
      s.cumdecay[t] = t == 0 ? s.decay[0] : s.cumdecay[t - 1] * s.decay[t];
      s.beta[t] = load_as_float(p.beta, p.dtype, tok);
    }
    // Keys transposed ([K][Cp], padding columns zero) for the Gram matrices and the state update.
    float* KT = s.kt.data();
    for (int64_t i = 0; i < K; ++i)
      for (int64_t t = 0; t < Cp; ++t) KT[i * Cp + t] = t < n ? Kc[t * K + i] : 0.0f;

    // Gram matrices Q K^T and K K^T over the full chunk width: only the lower triangle is used,
    // but one 64-wide register block computes the whole row faster than triangular pieces.
    float* Aqk = s.aqk.data();
    float* Akk = s.akk.data();
    const int64_t next = c0 + n, next_n = std::min(C, L.length - next);  // the next chunk
    for (int64_t r0 = 0; r0 < n; r0 += kRows) {
      const int64_t mr = std::min(kRows, n - r0);
      // The rows of one head are H (or HV) rows apart, a page or more, which the hardware
      // prefetchers do not follow: the next chunk's rows are requested (into L2) while this
      // chunk computes, a few tokens per row block (q, k here; v, o in the substitution below),
      // as a burst would wait for miss buffers. (Written out: a helper holding only prefetches
      // counts as free of side effects, and the compiler drops its calls.)
      for (int64_t t = r0; t < std::min(r0 + mr, next_n); ++t) {
        const TokenRows r = token_rows(p, L, qk_head, L.begin + next + t);
        for (int64_t b = 0; b < r.qk_bytes; b += 64) {
          __builtin_prefetch(r.q + b, 0, 2);
          __builtin_prefetch(r.k + b, 0, 2);
        }
      }
      const int64_t cols = Cp;
      gemm(mr, cols, K, Q + r0 * K, K, KT, Cp, Aqk + r0 * Cp, Cp, kOverwrite);
      gemm(mr, cols, K, Kc + r0 * K, K, KT, Cp, Akk + r0 * Cp, Cp, kOverwrite);
    }
    // Decay weights, row by row: drow holds D_tj for j <= t. Akk is stored negated, so every
    // later step only accumulates.
    float* drow = s.drow.data();
    for (int64_t t = 0; t < n; ++t) {
      const float e = s.decay[t], nb = -s.beta[t];
      for (int64_t j = 0; j < t; ++j) drow[j] *= e;
      drow[t] = 1.0f;
      float* aq = Aqk + t * Cp;
      float* ak = Akk + t * Cp;
      for (int64_t j = 0; j < t; ++j) {
        aq[j] *= drow[j];
        ak[j] *= nb * drow[j];
      }
      for (int64_t j = t + 1; j < Cp; ++j) aq[j] = 0.0f;  // read by the row block's last rows
    }
    // w = K S0, qs = Q S0.
    float* W = s.w.data();
    float* QS = s.qs.data();
    if (zero_state) {
      std::fill(W, W + n * V, 0.0f);
      std::fill(QS, QS + n * V, 0.0f);
    } else {
      gemm(n, V, K, Kc, K, S, V, W, V, kOverwrite);
      gemm(n, V, K, Q, K, S, V, QS, V, kOverwrite);
    }
    // u_t = beta_t (v_t - P_t w_t) + sum_{j<t} (-A_tj) u_j: blocks of kRows rows take the
    // finished rows above them in one product, then solve their own small triangle.
    for (int64_t t = 0; t < n; ++t) {
      const float b = s.beta[t], pt = s.cumdecay[t];
      float* ut = U + t * V;
      const float* wt = W + t * V;
      for (int64_t j = 0; j < V; ++j) ut[j] = b * (ut[j] - pt * wt[j]);
    }
    for (int64_t r0 = 0; r0 < n; r0 += kRows) {
      const int64_t mr = std::min(kRows, n - r0);
      for (int64_t t = r0; t < std::min(r0 + mr, next_n); ++t) {
        const TokenRows r = token_rows(p, L, qk_head, L.begin + next + t);
        for (int64_t b = 0; b < r.v_bytes; b += 64) {
          __builtin_prefetch(r.v + b, 0, 2);
          __builtin_prefetch(r.o + b, 1, 2);
        }
      }
      if (r0 > 0) gemm(mr, V, r0, Akk + r0 * Cp, Cp, U, V, U + r0 * V, V, kAccumulate);
      for (int64_t t = r0 + 1; t < r0 + mr; ++t) {
        float* ut = U + t * V;
        for (int64_t m = r0; m < t; ++m) {
          const float a = Akk[t * Cp + m];
          const float* um = U + m * V;
          for (int64_t j = 0; j < V; ++j) ut[j] += a * um[j];
        }
      }
    }
    // o_t = P_t qs_t + sum_{j <= t} (D .* Q K^T)_tj u_j
    for (int64_t t = 0; t < n; ++t) {
      const float pt = s.cumdecay[t];
      float* ot = QS + t * V;
      for (int64_t j = 0; j < V; ++j) ot[j] *= pt;
    }
    for (int64_t r0 = 0; r0 < n; r0 += kRows) {
      const int64_t mr = std::min(kRows, n - r0);
      gemm(mr, V, std::min(n, r0 + mr), Aqk + r0 * Cp, Cp, U, V, QS + r0 * V, V, kAccumulate);
    }
    for (int64_t t = 0; t < n; ++t) store_row(p.o, p.dtype, (tok0 + t * HV) * V, V, QS + t * V);
    // S = P_last S0 + (K .* D_last)^T U, with D_last = drow after the last token.
    float* KWT = s.kwt.data();
    for (int64_t i = 0; i < K; ++i)
      for (int64_t t = 0; t < n; ++t) KWT[i * Cp + t] = KT[i * Cp + t] * drow[t];
    gemm(K, V, n, KWT, Cp, U, V, S, V, zero_state ? kOverwrite : Start{true, s.cumdecay[n - 1]});
    zero_state = false;
    // A checkpoint at a block's end, and the running state in the block of the last token.
    const int64_t end = c0 + n;
    if (ck && (end % ck->block_size == 0 || end == L.length))
      if (float* row = checkpoint_row(p, *ck, L, (end - 1) / ck->block_size))
        std::copy_n(S, K * V, row);
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
  float* o = u + V;
  load_state(p, L, S);
  for (int64_t t = L.begin; t < L.begin + L.length; ++t) {
    const int64_t tok = (L.row * p.seq_len + t) * HV + L.head;
    load_qk(p, p.q, L.row, t, qk_head, scale, q);
    load_qk(p, p.k, L.row, t, qk_head, 1.0f, k);
    const float decay = std::exp(p.g[tok]);
    const float beta = load_as_float(p.beta, p.dtype, tok);
    load_row(p.v, p.dtype, tok * V, V, o);  // v, read into o before o is written
    recurrent_step(S, q, k, o, decay, beta, K, V, u, o);
    store_row(p.o, p.dtype, tok * V, V, o);
  }
  store_state(p, L, S);
}

}  // namespace

namespace {

Status run_chunked(const GatedDeltaRuleParams& p, const StateCheckpoints* ck) {
  if (Status st = check_gated_delta_rule_params(p); !st.ok()) return st;
  const std::vector<Lane> lanes = make_lanes(p);
  core::parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads, [&](int64_t i) {
    thread_local ChunkScratch scratch;
    scratch.resize(p.chunk_size, p.key_dim, p.value_dim);
    chunked_lane(p, lanes[i], scratch, ck);
  });
  return Status::Ok();
}

}  // namespace

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p) { return run_chunked(p, nullptr); }

Status chunked_gated_delta_rule(const GatedDeltaRuleParams& p, const StateCheckpoints& ck) {
  if (Status st = check_gated_delta_rule_params(p); !st.ok()) return st;
  if (ck.block_size < 1) return Status::InvalidArgument("checkpoint block_size must be >= 1");
  if (!ck.block_slots || !ck.pool || ck.max_blocks < 1 || ck.num_rows < 1)
    return Status::InvalidArgument("checkpoints need block_slots, max_blocks, pool and num_rows");
  if (p.state_slots) return Status::InvalidArgument("checkpoints take no state_slots");
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  std::vector<int32_t> used;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[s + 1] - p.cu_seqlens[s] : p.seq_len;
    if ((len + ck.block_size - 1) / ck.block_size > ck.max_blocks)
      return Status::InvalidArgument("sequence " + std::to_string(s) + " has more than " +
                                     std::to_string(ck.max_blocks) + " blocks");
    for (int64_t b = 0; b < ck.max_blocks; ++b)
      used.push_back(ck.block_slots[s * ck.max_blocks + b]);
  }
  if (Status st =
          check_state_slots(used.data(), static_cast<int64_t>(used.size()), ck.num_rows, true);
      !st.ok())
    return st;
  return run_chunked(p, &ck);
}

Status recurrent_gated_delta_rule(const GatedDeltaRuleParams& p) {
  if (Status st = check_gated_delta_rule_params(p); !st.ok()) return st;
  const std::vector<Lane> lanes = make_lanes(p);
  const int64_t K = p.key_dim, V = p.value_dim;
  core::parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads, [&](int64_t i) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(K * V + 2 * K + 2 * V));
    recurrent_lane(p, lanes[i], scratch);
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
