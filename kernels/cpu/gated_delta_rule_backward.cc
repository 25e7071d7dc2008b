// CPU backward of the gated delta rule: block-checkpointed recurrence in reverse, fp32.
#include "kernels/cpu/gated_delta_rule_backward.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_delta_rule_backward_lanes.h"
#include "kernels/cpu/row_conversion.h"

namespace deltacheck::kernels::cpu {
namespace backward_lanes {
namespace {

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

}  // namespace

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

Status run_backward(const GatedDeltaRuleBackwardParams& bp, const LaneFn& fn, bool lanes_write_qk) {
  if (Status st = check(bp); !st.ok()) return st;
  const GatedDeltaRuleParams& p = bp.forward;
  const int64_t H = p.num_heads, HV = p.num_value_heads, K = p.key_dim, V = p.value_dim;
  const int64_t tokens = p.batch * p.seq_len, group = HV / H;
  std::vector<uint8_t> live;
  const std::vector<Lane> lanes = make_lanes(p, live);
  // Per value head: every live token's rows are written by its lanes; dead ones are never read.
  lanes_write_qk = lanes_write_qk && HV == H;
  const size_t hat_size = lanes_write_qk ? 0 : static_cast<size_t>(tokens * HV * K);
  std::unique_ptr<float[]> dq_hat(lanes_write_qk ? nullptr : new float[hat_size]);
  std::unique_ptr<float[]> dk_hat(lanes_write_qk ? nullptr : new float[hat_size]);
  core::parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads,
                     [&](int64_t i) { fn(lanes[i], dq_hat.get(), dk_hat.get()); });

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
    if (lanes_write_qk) return;
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
}  // namespace backward_lanes

namespace {

using backward_lanes::dot, backward_lanes::Lane, backward_lanes::load_normalized,
    backward_lanes::resolved_scale;

// The forward in two halves, so that one pass over the state ends a token and begins the next.
// S is the state after a token, before the next token's decay.
//
// begin_token: err = v - (decay S)^T k.
void begin_token(const float* S, const float* k, const float* v, float decay, int64_t K, int64_t V,
                 float* err) {
  for (int64_t j = 0; j < V; ++j) err[j] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const float* si = S + i * V;
    const float ki = k[i];
    for (int64_t j = 0; j < V; ++j) err[j] += (decay * si[j]) * ki;
  }
  for (int64_t j = 0; j < V; ++j) err[j] = v[j] - err[j];
}

// The token end_token begins on its way (k == nullptr: none).
struct NextToken {
  const float* k = nullptr;
  const float* v = nullptr;
  float decay = 0.0f;
  float* err = nullptr;
};

// end_token: dst = decay src + k u^T (src may be dst), and begin_token(dst, next...) in the same
// pass, each sum spelled as begin_token spells it.
void end_token(const float* src, float* dst, const float* k, const float* u, float decay, int64_t K,
               int64_t V, const NextToken& next) {
  if (next.k)
    for (int64_t j = 0; j < V; ++j) next.err[j] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const float* si = src + i * V;
    float* di = dst + i * V;
    const float ki = k[i];
    if (next.k) {
      const float nk = next.k[i];
      for (int64_t j = 0; j < V; ++j) {
        const float s = decay * si[j] + ki * u[j];
        di[j] = s;
        next.err[j] += (next.decay * s) * nk;
      }
    } else {
      for (int64_t j = 0; j < V; ++j) di[j] = decay * si[j] + ki * u[j];
    }
  }
  if (next.k)
    for (int64_t j = 0; j < V; ++j) next.err[j] = next.v[j] - next.err[j];
}

// The reverse pass in two halves as well: undoing token t's update and decay (with dp = -beta du
// known) and reading token t-1 (o = S^T q and S = S' + k u^T) share one pass over dS.
struct UndoHalf {     // token t: dS' = dS + k dp^T, dk += S' dp, dg = <dS', S'>, dS = decay dS'
  const float* prev;  // the state before token t (S' = decay prev)
  const float* k;
  const float* dp;
  float decay;
  float* dk;
  float* dg;
};
struct ReadHalf {      // token t-1: dq = S do, dS += q do^T, du = dS^T k, dk = dS u
  const float* after;  // the state after token t-1
  const float *q, *k, *dout, *u;
  float *dq, *dk, *du;
};

// 16 partial sums per dot product, so the loops vectorize without reassociation flags.
constexpr int kParts = 16;

template <bool kUndo, bool kRead>
void reverse_row(int64_t V, float* __restrict d, const float* __restrict prev,
                 const float* __restrict dp, float decay, float kb, const float* __restrict after,
                 const float* __restrict dout, const float* __restrict u, float* __restrict du,
                 float qa, float ka, float* __restrict g_part, float sums[3]) {
  float kb_part[kParts] = {}, q_part[kParts] = {}, ka_part[kParts] = {};
  const int64_t full = V / kParts * kParts;
  for (int64_t j = 0; j < full; j += kParts) {
    float x[kParts];
    for (int l = 0; l < kParts; ++l) x[l] = d[j + l];
    if (kUndo)
      for (int l = 0; l < kParts; ++l) {
        const float sd = decay * prev[j + l], ds = x[l] + kb * dp[j + l];
        kb_part[l] += sd * dp[j + l];
        g_part[l] += ds * sd;
        x[l] = decay * ds;
      }
    if (kRead)
      for (int l = 0; l < kParts; ++l) {
        q_part[l] += after[j + l] * dout[j + l];
        x[l] += qa * dout[j + l];
        du[j + l] += ka * x[l];
        ka_part[l] += x[l] * u[j + l];
      }
    for (int l = 0; l < kParts; ++l) d[j + l] = x[l];
  }
  for (int64_t j = full; j < V; ++j) {  // odd head dims: the rest into the first partial sums
    float x = d[j];
    if (kUndo) {
      const float sd = decay * prev[j], ds = x + kb * dp[j];
      kb_part[0] += sd * dp[j];
      g_part[0] += ds * sd;
      x = decay * ds;
    }
    if (kRead) {
      q_part[0] += after[j] * dout[j];
      x += qa * dout[j];
      du[j] += ka * x;
      ka_part[0] += x * u[j];
    }
    d[j] = x;
  }
  sums[0] = sums[1] = sums[2] = 0.0f;
  for (int l = 0; l < kParts; ++l) {
    sums[0] += kb_part[l];
    sums[1] += q_part[l];
    sums[2] += ka_part[l];
  }
}

template <bool kUndo, bool kRead>
void reverse_pass(float* dS, int64_t K, int64_t V, const UndoHalf& b, const ReadHalf& a) {
  if (kRead)
    for (int64_t j = 0; j < V; ++j) a.du[j] = 0.0f;
  float g_part[kParts] = {}, sums[3];
  for (int64_t r = 0; r < K; ++r) {
    reverse_row<kUndo, kRead>(V, dS + r * V, kUndo ? b.prev + r * V : nullptr, b.dp, b.decay,
                              kUndo ? b.k[r] : 0.0f, kRead ? a.after + r * V : nullptr, a.dout, a.u,
                              a.du, kRead ? a.q[r] : 0.0f, kRead ? a.k[r] : 0.0f, g_part, sums);
    if (kUndo) b.dk[r] += sums[0];
    if (kRead) a.dq[r] = sums[1], a.dk[r] = sums[2];
  }
  if (kUndo) {
    float g = 0.0f;
    for (int l = 0; l < kParts; ++l) g += g_part[l];
    *b.dg = g;
  }
}

// Per-thread buffers: the state at every block start, the states inside one block, and the
// block's tokens (q scaled, k normalized, v, do, err, u, decays, betas); at least two token
// slots, as the first pass alternates between two.
struct Scratch {
  std::vector<float> starts, states, q, k, v, dout, err, u, decay, beta, dS, dp;
  void fit(int64_t blocks, int64_t C, int64_t K, int64_t V) {
    auto at_least = [](std::vector<float>& x, int64_t n) {
      if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
    };
    const int64_t slots = std::max<int64_t>(C, 2);
    at_least(starts, std::max<int64_t>(blocks, 1) * K * V), at_least(states, (C + 1) * K * V);
    at_least(q, slots * K), at_least(k, slots * K), at_least(v, slots * V);
    at_least(dout, slots * V), at_least(err, slots * V), at_least(u, slots * V);
    at_least(decay, slots), at_least(beta, slots), at_least(dS, K * V), at_least(dp, slots * V);
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
  // Loads token t of the lane into slot i of the block buffers (q and do only when asked).
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
  auto next_in = [&](int64_t i) -> NextToken {
    return {&s.k[i * K], &s.v[i * V], s.decay[i], &s.err[i * V]};
  };

  // First pass: keep the state at the start of every block (token slots 0 and 1 alternate).
  float* S = s.states.data();
  const int64_t state_row = (static_cast<int64_t>(L.slot) * HV + L.head) * KV;
  if (p.initial_state)
    std::copy(p.initial_state + state_row, p.initial_state + state_row + KV, S);
  else
    std::fill(S, S + KV, 0.0f);
  if (L.length > 0) {
    load_token(0, 0, false);
    begin_token(S, s.k.data(), s.v.data(), s.decay[0], K, V, s.err.data());
  }
  for (int64_t t = 0; t < L.length; ++t) {
    const int64_t cur = t % 2, nxt = 1 - cur;
    if (t % C == 0) std::copy(S, S + KV, &s.starts[(t / C) * KV]);
    float* u = &s.u[cur * V];
    for (int64_t j = 0; j < V; ++j) u[j] = s.beta[cur] * s.err[cur * V + j];
    NextToken next;
    if (t + 1 < L.length) load_token(t + 1, nxt, false), next = next_in(nxt);
    end_token(S, S, &s.k[cur * K], u, s.decay[cur], K, V, next);
  }

  float* dS = s.dS.data();  // gradient w.r.t. the state after the token being undone
  if (bp.d_final_state)
    std::copy(bp.d_final_state + state_row, bp.d_final_state + state_row + KV, dS);
  else
    std::fill(dS, dS + KV, 0.0f);
  for (int64_t b = blocks - 1; b >= 0; --b) {
    const int64_t t0 = b * C, n = std::min(C, L.length - t0);
    // Replay: states[i] is the state before token i of the block, states[n] after the last.
    std::copy(&s.starts[b * KV], &s.starts[b * KV] + KV, s.states.data());
    for (int64_t i = 0; i < n; ++i) load_token(t0 + i, i, true);
    begin_token(s.states.data(), s.k.data(), s.v.data(), s.decay[0], K, V, s.err.data());
    for (int64_t i = 0; i < n; ++i) {
      float* u = &s.u[i * V];
      for (int64_t j = 0; j < V; ++j) u[j] = s.beta[i] * s.err[i * V + j];
      end_token(&s.states[i * KV], &s.states[(i + 1) * KV], &s.k[i * K], u, s.decay[i], K, V,
                i + 1 < n ? next_in(i + 1) : NextToken{});
    }
    // Token i's read half ran in the pass before (with token i+1's undo half); du lands in dp.
    auto read = [&](int64_t i) -> ReadHalf {
      const int64_t tok = token(t0 + i);
      return {&s.states[(i + 1) * KV], &s.q[i * K],      &s.k[i * K], &s.dout[i * V], &s.u[i * V],
              dq_hat + tok * K,        dk_hat + tok * K, &s.dp[i * V]};
    };
    reverse_pass<false, true>(dS, K, V, UndoHalf{}, read(n - 1));
    for (int64_t i = n - 1; i >= 0; --i) {
      const int64_t tok = token(t0 + i);
      // u = beta (v - S'^T k): dbeta = du . err, dv = beta du, dp = d(S'^T k) = -beta du.
      float* dp = &s.dp[i * V];
      store_from_float(bp.dbeta, p.dtype, tok, dot(dp, &s.err[i * V], V));
      const float beta = s.beta[i];
      for (int64_t j = 0; j < V; ++j) dp[j] *= beta;
      store_row(bp.dv, p.dtype, tok * V, V, dp);
      for (int64_t j = 0; j < V; ++j) dp[j] = -dp[j];
      const UndoHalf undo{&s.states[i * KV], &s.k[i * K],      dp,
                          s.decay[i],        dk_hat + tok * K, bp.dg + tok};
      if (i > 0)
        reverse_pass<true, true>(dS, K, V, undo, read(i - 1));
      else
        reverse_pass<true, false>(dS, K, V, undo, ReadHalf{});
    }
  }
  if (bp.dh0) std::copy(dS, dS + KV, bp.dh0 + state_row);
}

}  // namespace

Status recurrent_gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& bp) {
  return backward_lanes::run_backward(bp, [&](const Lane& lane, float* dq_hat, float* dk_hat) {
    thread_local Scratch scratch;
    backward_lane(bp, lane, scratch, dq_hat, dk_hat);
  });
}

Status gated_delta_rule_backward(const GatedDeltaRuleBackwardParams& bp) {
  return bp.chunked ? chunked_gated_delta_rule_backward(bp)
                    : recurrent_gated_delta_rule_backward(bp);
}

}  // namespace deltacheck::kernels::cpu
