// CPU backward of the gated delta rule: block-checkpointed recurrence in reverse, fp32.
#include "kernels/cpu/gated_delta_rule_backward.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/row_conversion.h"

namespace deltacheck::kernels::cpu {
namespace {

struct Lane {
  int64_t row, begin, length, seq, head;
  int32_t slot;
};

int64_t sequences(const GatedDeltaRuleParams& p) { return p.cu_seqlens ? p.num_seqs : p.batch; }

// The forward's checks (kernels/cpu/gated_delta_rule.h), except that cu_seqlens may end before
// T, and the gradient buffers.
Status check(const GatedDeltaRuleBackwardParams& b) {
  if (!b.d_output || !b.dq || !b.dk || !b.dv || !b.dg || !b.dbeta)
    return Status::InvalidArgument("d_output, dq, dk, dv, dg and dbeta are required");
  GatedDeltaRuleParams f = b.forward;
  f.o = b.dq;  // the forward's output is not written here
  if (f.cu_seqlens && f.num_seqs >= 0) {
    if (f.cu_seqlens[f.num_seqs] > f.seq_len)
      return Status::InvalidArgument("cu_seqlens ends past T");
    f.seq_len = f.cu_seqlens[f.num_seqs];  // a padding tail follows
  }
  return check_gated_delta_rule_params(f);
}

// The live lanes (padding entries have none), longest first; live[b * T + t] marks the tokens
// that belong to a live sequence.
std::vector<Lane> make_lanes(const GatedDeltaRuleParams& p, std::vector<uint8_t>& live) {
  live.assign(static_cast<size_t>(p.batch * p.seq_len), 0);
  std::vector<Lane> lanes;
  for (int64_t s = 0; s < sequences(p); ++s) {
    const int32_t slot = p.state_slots ? p.state_slots[s] : static_cast<int32_t>(s);
    if (slot < 0) continue;
    const int64_t row = p.cu_seqlens ? 0 : s;
    const int64_t begin = p.cu_seqlens ? p.cu_seqlens[s] : 0;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[s + 1] - begin : p.seq_len;
    std::fill(live.begin() + row * p.seq_len + begin, live.begin() + row * p.seq_len + begin + len,
              1);
    for (int64_t h = 0; h < p.num_value_heads; ++h) lanes.push_back({row, begin, len, s, h, slot});
  }
  std::stable_sort(lanes.begin(), lanes.end(),
                   [](const Lane& a, const Lane& b) { return a.length > b.length; });
  return lanes;
}

// Sums with 16 partial sums, so the loops vectorize without reassociation flags.
float dot(const float* a, const float* b, int64_t n) {
  float part[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) part[l] += a[j + l] * b[j + l];
  float s = 0.0f;
  for (; j < n; ++j) s += a[j] * b[j];
  for (int l = 0; l < 16; ++l) s += part[l];
  return s;
}

// Row `index` of q or k ([.., K] in dtype) in fp32 as the forward uses it: x / sqrt(sum x^2 +
// 1e-6) when asked (x unchanged otherwise); returns that factor.
float load_normalized(const GatedDeltaRuleParams& p, const void* src, int64_t index, float* dst) {
  const int64_t K = p.key_dim;
  load_row(src, p.dtype, index * K, K, dst);
  if (!p.use_qk_l2norm) return 1.0f;
  const float r = 1.0f / std::sqrt(dot(dst, dst, K) + 1e-6f);
  for (int64_t i = 0; i < K; ++i) dst[i] *= r;
  return r;
}

float resolved_scale(const GatedDeltaRuleParams& p) {
  return p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.key_dim));
}

// One forward token on a [K][V] state: dst = decay src; err = v - dst^T k; u = beta err;
// dst += k u^T. src may be dst.
void forward_step(const float* src, float* dst, const float* k, const float* v, float decay,
                  float beta, int64_t K, int64_t V, float* err, float* u) {
  for (int64_t j = 0; j < V; ++j) err[j] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const float* si = src + i * V;
    float* di = dst + i * V;
    const float ki = k[i];
    for (int64_t j = 0; j < V; ++j) {
      di[j] = decay * si[j];
      err[j] += di[j] * ki;
    }
  }
  for (int64_t j = 0; j < V; ++j) {
    err[j] = v[j] - err[j];
    u[j] = beta * err[j];
  }
  for (int64_t i = 0; i < K; ++i) {
    float* di = dst + i * V;
    const float ki = k[i];
    for (int64_t j = 0; j < V; ++j) di[j] += ki * u[j];
  }
}

// Per-thread buffers: the state at every block start, the states inside one block, and the
// block's tokens (q scaled, k normalized, v, do, err, u, decays, betas).
struct Scratch {
  std::vector<float> starts, states, q, k, v, dout, err, u, decay, beta, dS, du, dp;
  void fit(int64_t blocks, int64_t C, int64_t K, int64_t V) {
    auto at_least = [](std::vector<float>& x, int64_t n) {
      if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
    };
    at_least(starts, std::max<int64_t>(blocks, 1) * K * V), at_least(states, (C + 1) * K * V);
    at_least(q, C * K), at_least(k, C * K), at_least(v, C * V), at_least(dout, C * V);
    at_least(err, C * V), at_least(u, C * V), at_least(decay, C), at_least(beta, C);
    at_least(dS, K * V), at_least(du, V), at_least(dp, V);
  }
};

// The lane's reverse pass. Writes dv, dg, dbeta of its tokens, the gradients w.r.t. the scaled,
// normalized q and the normalized k of its value head into dq_hat / dk_hat ([B, T, HV, K]), and
// its dh0 row.
void backward_lane(const GatedDeltaRuleBackwardParams& bp, const Lane& L, Scratch& s, float* dq_hat,
                   float* dk_hat) {
  const GatedDeltaRuleParams& p = bp.forward;
  const int64_t K = p.key_dim, V = p.value_dim, KV = K * V, HV = p.num_value_heads;
  const int64_t T = p.seq_len, C = p.chunk_size, qk_head = L.head / (HV / p.num_heads);
  const int64_t blocks = (L.length + C - 1) / C;
  const float scale = resolved_scale(p);
  s.fit(blocks, C, K, V);
  auto token = [&](int64_t t) { return (L.row * T + L.begin + t) * HV + L.head; };
  auto qk_row = [&](int64_t t) { return (L.row * T + L.begin + t) * p.num_heads + qk_head; };
  // Loads token t of the lane into slot i of the block buffers (q only when asked).
  auto load_token = [&](int64_t t, int64_t i, bool with_q) {
    const int64_t tok = token(t);
    if (with_q) {
      load_normalized(p, p.q, qk_row(t), &s.q[i * K]);
      for (int64_t e = 0; e < K; ++e) s.q[i * K + e] *= scale;
      load_row(bp.d_output, p.dtype, tok * V, V, &s.dout[i * V]);
    }
    load_normalized(p, p.k, qk_row(t), &s.k[i * K]);
    load_row(p.v, p.dtype, tok * V, V, &s.v[i * V]);
    s.decay[i] = std::exp(p.g[tok]);
    s.beta[i] = load_as_float(p.beta, p.dtype, tok);
  };

  // Forward: keep the state at the start of every block.
  float* S = s.states.data();
  const int64_t state_row = (static_cast<int64_t>(L.slot) * HV + L.head) * KV;
  if (p.initial_state)
    std::copy(p.initial_state + state_row, p.initial_state + state_row + KV, S);
  else
    std::fill(S, S + KV, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    std::copy(S, S + KV, &s.starts[b * KV]);
    for (int64_t t = b * C; t < std::min(L.length, (b + 1) * C); ++t) {
      load_token(t, 0, false);
      forward_step(S, S, s.k.data(), s.v.data(), s.decay[0], s.beta[0], K, V, s.err.data(),
                   s.u.data());
    }
  }

  float* dS = s.dS.data();  // gradient w.r.t. the state after the token being undone
  if (bp.d_final_state)
    std::copy(bp.d_final_state + state_row, bp.d_final_state + state_row + KV, dS);
  else
    std::fill(dS, dS + KV, 0.0f);
  float* du = s.du.data();
  float* dp = s.dp.data();
  for (int64_t b = blocks - 1; b >= 0; --b) {
    const int64_t t0 = b * C, n = std::min(C, L.length - t0);
    // Replay: states[i] is the state before token i of the block, states[n] after the last.
    std::copy(&s.starts[b * KV], &s.starts[b * KV] + KV, s.states.data());
    for (int64_t i = 0; i < n; ++i) {
      load_token(t0 + i, i, true);
      forward_step(&s.states[i * KV], &s.states[(i + 1) * KV], &s.k[i * K], &s.v[i * V], s.decay[i],
                   s.beta[i], K, V, &s.err[i * V], &s.u[i * V]);
    }
    for (int64_t i = n - 1; i >= 0; --i) {
      const int64_t tok = token(t0 + i);
      const float* q = &s.q[i * K];
      const float* k = &s.k[i * K];
      const float* dout = &s.dout[i * V];
      const float* u = &s.u[i * V];
      const float* prev = &s.states[i * KV];
      const float* after = &s.states[(i + 1) * KV];
      float* dqh = dq_hat + tok * K;
      float* dkh = dk_hat + tok * K;
      const float decay = s.decay[i], beta = s.beta[i];
      // o = S^T q: dq = S do, dS += q do^T. S = S' + k u^T: du = dS^T k, dk = dS u.
      for (int64_t j = 0; j < V; ++j) du[j] = 0.0f;
      for (int64_t r = 0; r < K; ++r) {
        float* dSr = dS + r * V;
        dqh[r] = dot(after + r * V, dout, V);
        const float qr = q[r], kr = k[r];
        for (int64_t j = 0; j < V; ++j) {
          dSr[j] += qr * dout[j];
          du[j] += kr * dSr[j];
        }
        dkh[r] = dot(dSr, u, V);
      }
      // u = beta (v - S'^T k): dbeta = du . err, dv = beta du, d(S'^T k) = -beta du.
      store_from_float(bp.dbeta, p.dtype, tok, dot(du, &s.err[i * V], V));
      for (int64_t j = 0; j < V; ++j) dp[j] = -beta * du[j];
      for (int64_t j = 0; j < V; ++j) du[j] *= beta;
      store_row(bp.dv, p.dtype, tok * V, V, du);
      // dS' = dS + k dp^T, dk += S' dp; S' = decay S_prev: dg = <dS', S'>, dS_prev = decay dS'.
      float dg_part[16] = {};
      float dg = 0.0f;
      for (int64_t r = 0; r < K; ++r) {
        const float* pr = prev + r * V;
        float* dSr = dS + r * V;
        const float kr = k[r];
        float dk_part[16] = {};
        float dk_r = 0.0f;
        int64_t j = 0;
        for (; j + 16 <= V; j += 16)
          for (int l = 0; l < 16; ++l) {
            const float sd = decay * pr[j + l], ds = dSr[j + l] + kr * dp[j + l];
            dk_part[l] += sd * dp[j + l];
            dg_part[l] += ds * sd;
            dSr[j + l] = decay * ds;
          }
        for (; j < V; ++j) {
          const float sd = decay * pr[j], ds = dSr[j] + kr * dp[j];
          dk_r += sd * dp[j];
          dg += ds * sd;
          dSr[j] = decay * ds;
        }
        for (int l = 0; l < 16; ++l) dk_r += dk_part[l];
        dkh[r] += dk_r;
      }
      for (int l = 0; l < 16; ++l) dg += dg_part[l];
      bp.dg[tok] = dg;
    }
  }
  if (bp.dh0) std::copy(dS, dS + KV, bp.dh0 + state_row);
}

}  // namespace

Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& bp) {
  if (Status st = check(bp); !st.ok()) return st;
  const GatedDeltaRuleParams& p = bp.forward;
  const int64_t H = p.num_heads, HV = p.num_value_heads, K = p.key_dim, V = p.value_dim;
  const int64_t tokens = p.batch * p.seq_len, group = HV / H;
  std::vector<uint8_t> live;
  const std::vector<Lane> lanes = make_lanes(p, live);
  // Per value head: every live token's rows are written by its lanes; dead ones are never read.
  std::unique_ptr<float[]> dq_hat(new float[static_cast<size_t>(tokens * HV * K)]);
  std::unique_ptr<float[]> dk_hat(new float[static_cast<size_t>(tokens * HV * K)]);
  core::parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads, [&](int64_t i) {
    thread_local Scratch scratch;
    backward_lane(bp, lanes[i], scratch, dq_hat.get(), dk_hat.get());
  });

  // Per token: dq and dk (the group's sum, in head order, through the norm:
  // dx = r (dx_hat - x_hat (x_hat . dx_hat))); dead tokens get zeros everywhere.
  const float scale = resolved_scale(p);
  core::parallel_for(tokens, p.num_threads, [&](int64_t bt) {
    thread_local std::vector<float> x_hat, dx;
    x_hat.resize(static_cast<size_t>(std::max(K, V))), dx.resize(x_hat.size());
    if (!live[bt]) {
      std::fill(dx.begin(), dx.end(), 0.0f);
      for (int64_t h = 0; h < H; ++h) {
        store_row(bp.dq, p.dtype, (bt * H + h) * K, K, dx.data());
        store_row(bp.dk, p.dtype, (bt * H + h) * K, K, dx.data());
      }
      for (int64_t h = 0; h < HV; ++h) {
        store_row(bp.dv, p.dtype, (bt * HV + h) * V, V, dx.data());
        store_from_float(bp.dbeta, p.dtype, bt * HV + h, 0.0f);
        bp.dg[bt * HV + h] = 0.0f;
      }
      return;
    }
    for (int64_t h = 0; h < H; ++h) {
      for (int pass = 0; pass < 2; ++pass) {
        const float* d_hat = (pass == 0 ? dq_hat : dk_hat).get() + (bt * HV + h * group) * K;
        std::copy(d_hat, d_hat + K, dx.data());
        for (int64_t m = 1; m < group; ++m)
          for (int64_t i = 0; i < K; ++i) dx[i] += d_hat[m * K + i];
        const float factor = pass == 0 ? scale : 1.0f;
        const float r = load_normalized(p, pass == 0 ? p.q : p.k, bt * H + h, x_hat.data());
        const float proj = p.use_qk_l2norm ? dot(x_hat.data(), dx.data(), K) : 0.0f;
        for (int64_t i = 0; i < K; ++i) dx[i] = factor * r * (dx[i] - x_hat[i] * proj);
        store_row(pass == 0 ? bp.dq : bp.dk, p.dtype, (bt * H + h) * K, K, dx.data());
      }
    }
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
