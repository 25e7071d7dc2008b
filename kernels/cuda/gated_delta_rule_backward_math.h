// The CUDA backward of the gated delta rule (gated_delta_rule_backward.h) as host/device code: the
// work items, the per-thread arithmetic and the order of every cross-thread sum, written once and
// compiled twice. nvcc compiles it into the kernels of gated_delta_rule_backward.cu; g++ compiles
// it (without CUDA) into the host emulation of tests/kernels/cuda_host/, which runs the same item
// bodies over a host loop of CTAs and threads and compares them with the FP64 backward.
//
// Work decomposition (backward_item): one work item per (sequence, value head, block of 32 value
// columns), as the forward's recurrent kernel: a CTA of 8 warps, thread (warp, lane) owns rows
// warp + 8r of column lane of the state slice S[:, v0 : v0 + 32] and of its gradient dS, in
// registers. The columns evolve independently given q, k, g and beta, so an item needs nothing of
// another item's columns. Per item:
//   1. forward: the recurrence from h0, keeping the state at every block_len-th token in
//      `checkpoints` (global workspace);
//   2. reverse, block by block from the last: the block replayed from its checkpoint, keeping the
//      state before each token in this CTA's `block_states` (global workspace) and u, err in
//      shared memory, then run backwards token by token from dS = dht.
// Per token the reverse pass writes dv (complete per column) and the item's partials of the
// cross-column sums (dq_hat, dk_hat: gradients w.r.t. the scaled, normalized q and the normalized
// k; dbeta; dg) into [token, HV, value block] slots of the workspace; the reduction (reduce_token,
// one CTA per (token, key head)) sums them in a fixed order (value heads of the group, then value
// blocks), takes dq, dk through the L2 norm and the scale, and writes zeros for every token of no
// live sequence. No atomics: the same bits every run, for any grid size.
//
// A CTA's threads synchronize only between phases: every phase is one call of Exec::each(f), which
// on the device runs f for the calling thread and then __syncthreads(), and in the host emulation
// runs f for thread 0 .. 255 in turn (registers: one Regs per thread). Cross-thread sums go through
// shared memory and are added in thread order by one thread, never by shuffles, so the host runs
// the same additions in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "kernels/common/gated_delta_rule_params.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define DC_HD __host__ __device__
#else
#define DC_HD
#endif
#ifdef __CUDA_ARCH__  // the device pass only: the host compiler does not know the pragma
#define DC_UNROLL _Pragma("unroll")
#else
#define DC_UNROLL
#endif

namespace deltacheck::kernels::cuda::gdr_bwd {

constexpr int kWarps = 8;
constexpr int kLanes = 32;  // value columns per item, one per lane
constexpr int kThreads = kWarps * kLanes;
constexpr int kMaxKeyDim = 128;
constexpr int kRows = kMaxKeyDim / kWarps;  // state rows per thread
constexpr int kMaxBlock = 64;               // the most tokens between checkpoints
constexpr int kRowStride = kLanes + 1;      // of the row partials: thread d reads row d

// bf16 and fp16 activations as their bits (the host side has no CUDA types).
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

DC_HD inline float to_f32(float x) { return x; }
DC_HD inline float to_f32(Bf16 x) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
#else
  return bf16_to_float(x.bits);
#endif
}
DC_HD inline float to_f32(F16 x) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(x.bits));
#else
  return fp16_to_float(x.bits);
#endif
}

// Round to nearest even, as core/half.h does.
template <typename T>
DC_HD T from_f32(float x);
template <>
DC_HD inline float from_f32<float>(float x) {
  return x;
}
template <>
DC_HD inline Bf16 from_f32<Bf16>(float x) {
#ifdef __CUDA_ARCH__
  return {__bfloat16_as_ushort(__float2bfloat16_rn(x))};
#else
  return {float_to_bf16(x)};
#endif
}
template <>
DC_HD inline F16 from_f32<F16>(float x) {
#ifdef __CUDA_ARCH__
  return {__half_as_ushort(__float2half_rn(x))};
#else
  return {float_to_fp16(x)};
#endif
}

DC_HD inline float exp_f32(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}
DC_HD inline float rsqrt_f32(float x) {  // 1 / sqrt(x), as the forward spells it
#ifdef __CUDA_ARCH__
  return 1.0f / sqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}

// The problem (kernels/common/gated_delta_rule_params.h, GatedDeltaRuleBackwardParams) and the
// workspace, as both kernels take it. Offsets are 64-bit throughout.
struct Args {
  int64_t seq_len, num_heads, num_value_heads;
  int key_dim;
  int64_t value_dim;
  const void* q;  // [B, T, H, K] in the activation type
  const void* k;
  const void* v;  // [B, T, HV, V]
  const float* g;
  const void* beta;
  const void* d_output;        // [B, T, HV, V]
  const float* d_final_state;  // [rows, HV, K, V] or nullptr
  const int64_t* cu_seqlens;   // nullptr: num_seqs = B rows of seq_len tokens
  int64_t num_seqs;
  const float* initial_state;  // [rows, HV, K, V] or nullptr
  const int32_t* state_slots;  // [num_seqs] or nullptr
  int64_t num_state_rows;
  void* dq;  // [B, T, H, K]
  void* dk;
  void* dv;  // [B, T, HV, V]
  float* dg;
  void* dbeta;
  float* dh0;  // or nullptr
  float scale;
  bool use_qk_l2norm;
  int block_len;  // tokens between checkpoints, 1 .. kMaxBlock
  int64_t num_value_blocks;
  int64_t num_items;   // num_seqs * HV * num_value_blocks
  int64_t num_tokens;  // B * T
  // Workspace (gated_delta_rule_backward.cu sizes it).
  float* checkpoints;   // [num_checkpoints(), HV, num_value_blocks, K, kLanes]
  float* block_states;  // per CTA: [block_len + 1, K, kLanes]
  float* dq_part;       // [num_tokens, HV, num_value_blocks, K]
  float* dk_part;       // [num_tokens, HV, num_value_blocks, K]
  float* dbeta_part;    // [num_tokens, HV, num_value_blocks]
  float* dg_part;       // [num_tokens, HV, num_value_blocks]
  uint8_t* live;        // [num_tokens], zeroed before the backward kernel; 1: a live sequence's
};

DC_HD inline int64_t num_sequences(int64_t batch, const int64_t* cu_seqlens, int64_t num_seqs) {
  return cu_seqlens ? num_seqs : batch;
}

// Checkpoint slots: sequence s (first token bos) keeps its block b in slot s + bos / block_len
// + b. Consecutive sequences never share a slot (the next one starts at least ceil(len /
// block_len) slots later), so the count is num_seqs + ceil(num_tokens / block_len).
DC_HD inline int64_t num_checkpoints(int64_t num_seqs, int64_t num_tokens, int block_len) {
  return num_seqs + (num_tokens + block_len - 1) / block_len;
}
DC_HD inline int64_t block_state_floats(int key_dim, int block_len) {
  return static_cast<int64_t>(block_len + 1) * key_dim * kLanes;
}

// Shared memory of the backward kernel, carved from one float array.
struct Smem {
  float* q;      // [kMaxBlock][K] scaled, normalized q of the block's tokens
  float* k;      // [kMaxBlock][K] normalized k
  float* norm;   // [2 * kMaxBlock] the L2 norm factors (k rows, then q rows)
  float* decay;  // [kMaxBlock] exp(g)
  float* beta;   // [kMaxBlock]
  float* u;      // [kMaxBlock][kLanes] u = beta err per column
  float* err;    // [kMaxBlock][kLanes] v - S'^T k per column
  float* part;   // [kWarps][kLanes] per-warp column partials (S'^T k, then du)
  float* gpart;  // [kWarps][kLanes] dg partials
  float* bpart;  // [kLanes] dbeta terms
  float* row_q;  // [K][kRowStride] per-thread partials of dq_hat rows
  float* row_k;  // [K][kRowStride] per-thread partials of dk_hat rows
};

DC_HD inline int64_t smem_floats(int key_dim) {
  return 2 * kMaxBlock * key_dim + 2 * kMaxBlock + 2 * kMaxBlock + 2 * kMaxBlock * kLanes +
         2 * kWarps * kLanes + kLanes + 2 * key_dim * kRowStride;
}

DC_HD inline Smem carve(float* base, int key_dim) {
  Smem s;
  s.q = base;
  s.k = s.q + kMaxBlock * key_dim;
  s.norm = s.k + kMaxBlock * key_dim;
  s.decay = s.norm + 2 * kMaxBlock;
  s.beta = s.decay + kMaxBlock;
  s.u = s.beta + kMaxBlock;
  s.err = s.u + kMaxBlock * kLanes;
  s.part = s.err + kMaxBlock * kLanes;
  s.gpart = s.part + kWarps * kLanes;
  s.bpart = s.gpart + kWarps * kLanes;
  s.row_q = s.bpart + kLanes;
  s.row_k = s.row_q + key_dim * kRowStride;
  return s;
}

// A thread's registers: rows warp + 8r of its column of S and dS.
struct Regs {
  float S[kRows];
  float dS[kRows];
};

struct Item {
  bool active;
  int64_t seq, head, qk_head, vb;
  int64_t bos, len;  // first token in the flattened [B * T] token axis, and length
  int64_t slot;
  int64_t v0;
  int vcols;  // valid columns of this value block, 1 .. 32
};

// Item -> (sequence, value head, value block), as the forward's resolve_item. A padding entry
// (negative slot) and a sequence whose bounds or slot are out of range come back inactive:
// nothing of them is read or written, and its tokens stay dead (zero gradients).
DC_HD inline Item resolve(const Args& a, int64_t item) {
  Item w{};
  w.vb = item % a.num_value_blocks;
  const int64_t rest = item / a.num_value_blocks;
  w.head = rest % a.num_value_heads;
  w.seq = rest / a.num_value_heads;
  w.qk_head = w.head / (a.num_value_heads / a.num_heads);
  w.slot = a.state_slots ? static_cast<int64_t>(a.state_slots[w.seq]) : w.seq;
  w.active = w.slot >= 0 && w.slot < a.num_state_rows;
  if (a.cu_seqlens) {
    w.bos = a.cu_seqlens[w.seq];
    const int64_t eos = a.cu_seqlens[w.seq + 1];
    w.len = eos - w.bos;
    w.active = w.active && w.bos >= 0 && w.len >= 0 && eos <= a.seq_len;
  } else {
    w.bos = w.seq * a.seq_len;
    w.len = a.seq_len;
  }
  w.v0 = w.vb * kLanes;
  const int64_t cols = a.value_dim - w.v0;
  w.vcols = static_cast<int>(cols < kLanes ? cols : kLanes);
  return w;
}

// Offset of (row d, lane) of a [.., K, kLanes] slice.
DC_HD inline int64_t slice_at(int d, int lane) { return static_cast<int64_t>(d) * kLanes + lane; }

DC_HD inline float* checkpoint(const Args& a, const Item& w, int64_t block) {
  const int64_t slot = w.seq + w.bos / a.block_len + block;
  return a.checkpoints +
         ((slot * a.num_value_heads + w.head) * a.num_value_blocks + w.vb) * a.key_dim * kLanes;
}

// Loads the block's tokens t0 .. t0 + n - 1 of the item into shared memory: k (normalized), q
// (normalized and scaled, when with_q), decays and betas. Three phases.
template <typename T, typename Exec>
DC_HD void load_block(Exec& ex, const Args& a, const Item& w, const Smem& s, int64_t t0, int n,
                      bool with_q) {
  const int K = a.key_dim;
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* beta = static_cast<const T*>(a.beta);
  ex.each([&](int tid, Regs&) {
    for (int idx = tid; idx < n * K; idx += kThreads) {
      const int t = idx / K, d = idx % K;
      const int64_t at = ((w.bos + t0 + t) * a.num_heads + w.qk_head) * K + d;
      s.k[t * K + d] = to_f32(k[at]);
      if (with_q) s.q[t * K + d] = to_f32(q[at]);
    }
    if (tid < n) {
      const int64_t tok = (w.bos + t0 + tid) * a.num_value_heads + w.head;
      s.decay[tid] = exp_f32(a.g[tok]);
      s.beta[tid] = to_f32(beta[tok]);
    }
  });
  // The norm factor of every row, each summed in element order by one thread.
  ex.each([&](int tid, Regs&) {
    if (tid >= 2 * n || (tid >= n && !with_q)) return;
    const float* row = tid < n ? s.k + tid * K : s.q + (tid - n) * K;
    float ss = 0.0f;
    for (int d = 0; d < K; ++d) ss += row[d] * row[d];
    s.norm[tid] = a.use_qk_l2norm ? rsqrt_f32(ss + 1e-6f) : 1.0f;
  });
  ex.each([&](int tid, Regs&) {
    for (int idx = tid; idx < n * K; idx += kThreads) {
      const int t = idx / K;
      s.k[idx] *= s.norm[t];
      if (with_q) s.q[idx] *= s.norm[n + t] * a.scale;
    }
  });
}

// Token i of the block, forward: S <- decay S; err = v - S^T k; u = beta err; S <- S + k u^T.
// With `states` (the replay), the state before the token goes to states[i] and, for the block's
// last token (i == n - 1), the state after it to states[n]; u and err go to shared memory.
template <typename T, typename Exec>
DC_HD void forward_token(Exec& ex, const Args& a, const Item& w, const Smem& s, int64_t t0, int i,
                         int n, float* states) {
  const int K = a.key_dim;
  ex.each([&](int tid, Regs& r) {
    const int warp = tid / kLanes, lane = tid % kLanes;
    const float decay = s.decay[i];
    float partial = 0.0f;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) {
        if (states) states[i * K * kLanes + slice_at(d, lane)] = r.S[j];
        r.S[j] *= decay;
        partial += s.k[i * K + d] * r.S[j];
      }
    }
    s.part[warp * kLanes + lane] = partial;
  });
  ex.each([&](int tid, Regs& r) {
    const int warp = tid / kLanes, lane = tid % kLanes;
    float ks = 0.0f;
    for (int m = 0; m < kWarps; ++m) ks += s.part[m * kLanes + lane];
    const T* v = static_cast<const T*>(a.v);
    const int64_t tok = w.bos + t0 + i;
    const float vt = lane < w.vcols
                         ? to_f32(v[(tok * a.num_value_heads + w.head) * a.value_dim + w.v0 + lane])
                         : 0.0f;
    const float err = vt - ks;
    const float u = s.beta[i] * err;
    if (warp == 0) s.u[i * kLanes + lane] = u, s.err[i * kLanes + lane] = err;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) {
        r.S[j] += s.k[i * K + d] * u;
        if (states && i == n - 1) states[n * K * kLanes + slice_at(d, lane)] = r.S[j];
      }
    }
  });
}

// Token i of the block, in reverse, with r.dS the gradient w.r.t. the state after it (on return:
// w.r.t. the state before it). Three phases:
//   A: dq_hat = S do (row partials), dS += q do^T, du = dS^T k (column partials), dk_hat = dS u;
//   B: dv = beta du, dp = -beta du, dbeta term du err; dS' = dS + k dp^T, dk_hat += S' dp,
//      dg = <dS', S'> (partials), dS = decay dS' (S' = decay times the state before the token);
//   C: the row partials summed over the 32 lanes (thread d: row d), dg over warps then lanes, dbeta
//      over lanes, into the item's slots of the workspace.
template <typename T, typename Exec>
DC_HD void reverse_token(Exec& ex, const Args& a, const Item& w, const Smem& s, int64_t t0, int i,
                         const float* states) {
  const int K = a.key_dim;
  const int64_t HV = a.num_value_heads;
  const int64_t tok = w.bos + t0 + i;
  ex.each([&](int tid, Regs& r) {
    const int warp = tid / kLanes, lane = tid % kLanes;
    const T* dout = static_cast<const T*>(a.d_output);
    const float dout_c =
        lane < w.vcols ? to_f32(dout[(tok * HV + w.head) * a.value_dim + w.v0 + lane]) : 0.0f;
    const float u = s.u[i * kLanes + lane];
    const float* after = states + (i + 1) * K * kLanes;
    float du = 0.0f;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) {
        s.row_q[d * kRowStride + lane] = after[slice_at(d, lane)] * dout_c;
        r.dS[j] += s.q[i * K + d] * dout_c;
        du += r.dS[j] * s.k[i * K + d];
        s.row_k[d * kRowStride + lane] = r.dS[j] * u;
      }
    }
    s.part[warp * kLanes + lane] = du;
  });
  ex.each([&](int tid, Regs& r) {
    const int warp = tid / kLanes, lane = tid % kLanes;
    float du = 0.0f;
    for (int m = 0; m < kWarps; ++m) du += s.part[m * kLanes + lane];
    const float beta = s.beta[i], decay = s.decay[i];
    if (warp == 0) {
      if (lane < w.vcols)
        static_cast<T*>(a.dv)[(tok * HV + w.head) * a.value_dim + w.v0 + lane] =
            from_f32<T>(beta * du);
      s.bpart[lane] = du * s.err[i * kLanes + lane];
    }
    const float dp = -beta * du;
    const float* before = states + i * K * kLanes;
    float dg = 0.0f;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) {
        const float sd = decay * before[slice_at(d, lane)];
        const float ds = r.dS[j] + s.k[i * K + d] * dp;
        s.row_k[d * kRowStride + lane] += sd * dp;
        dg += ds * sd;
        r.dS[j] = decay * ds;
      }
    }
    s.gpart[warp * kLanes + lane] = dg;
  });
  ex.each([&](int tid, Regs&) {
    const int64_t slot = (tok * HV + w.head) * a.num_value_blocks + w.vb;
    if (tid < K) {
      float dq = 0.0f, dk = 0.0f;
      for (int l = 0; l < kLanes; ++l) {
        dq += s.row_q[tid * kRowStride + l];
        dk += s.row_k[tid * kRowStride + l];
      }
      a.dq_part[slot * K + tid] = dq;
      a.dk_part[slot * K + tid] = dk;
    } else if (tid == kThreads - 1) {
      float dg = 0.0f, dbeta = 0.0f;
      for (int m = 0; m < kWarps; ++m)
        for (int l = 0; l < kLanes; ++l) dg += s.gpart[m * kLanes + l];
      for (int l = 0; l < kLanes; ++l) dbeta += s.bpart[l];
      a.dg_part[slot] = dg;
      a.dbeta_part[slot] = dbeta;
    }
  });
}

// One work item of the backward kernel, run by one CTA; `states` is the CTA's block_states.
template <typename T, typename Exec>
DC_HD void backward_item(Exec& ex, const Args& a, int64_t item, const Smem& s, float* states) {
  const Item w = resolve(a, item);
  if (!w.active) return;  // uniform across the CTA
  const int K = a.key_dim, C = a.block_len;
  const int64_t KV = static_cast<int64_t>(K) * a.value_dim;
  const int64_t row = (w.slot * a.num_value_heads + w.head) * KV;
  const int64_t blocks = (w.len + C - 1) / C;
  auto load_rows = [&](int tid, float* dst, const float* src) {  // S[:, v0 + lane] of src
    const int warp = tid / kLanes, lane = tid % kLanes;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      dst[j] = src && d < K && lane < w.vcols ? src[row + d * a.value_dim + w.v0 + lane] : 0.0f;
    }
  };
  ex.each([&](int tid, Regs& r) {
    if (w.head == 0 && w.vb == 0)  // one item per sequence marks its tokens live
      for (int64_t t = tid; t < w.len; t += kThreads) a.live[w.bos + t] = 1;
    load_rows(tid, r.S, a.initial_state);
  });
  auto copy_slice = [&](int tid, float* S, float* slice, bool store) {
    const int warp = tid / kLanes, lane = tid % kLanes;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) {
        if (store)
          slice[slice_at(d, lane)] = S[j];
        else
          S[j] = slice[slice_at(d, lane)];
      }
    }
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int n = static_cast<int>(w.len - b * C < C ? w.len - b * C : C);
    ex.each([&](int tid, Regs& r) { copy_slice(tid, r.S, checkpoint(a, w, b), true); });
    load_block<T>(ex, a, w, s, b * C, n, false);
    for (int i = 0; i < n; ++i) forward_token<T>(ex, a, w, s, b * C, i, n, nullptr);
  }
  ex.each([&](int tid, Regs& r) { load_rows(tid, r.dS, a.d_final_state); });
  for (int64_t b = blocks - 1; b >= 0; --b) {
    const int n = static_cast<int>(w.len - b * C < C ? w.len - b * C : C);
    ex.each([&](int tid, Regs& r) { copy_slice(tid, r.S, checkpoint(a, w, b), false); });
    load_block<T>(ex, a, w, s, b * C, n, true);
    for (int i = 0; i < n; ++i) forward_token<T>(ex, a, w, s, b * C, i, n, states);
    for (int i = n - 1; i >= 0; --i) reverse_token<T>(ex, a, w, s, b * C, i, states);
  }
  ex.each([&](int tid, Regs& r) {
    if (!a.dh0) return;
    const int warp = tid / kLanes, lane = tid % kLanes;
    if (lane >= w.vcols) return;
    DC_UNROLL
    for (int j = 0; j < kRows; ++j) {
      const int d = warp + kWarps * j;
      if (d < K) a.dh0[row + d * a.value_dim + w.v0 + lane] = r.dS[j];
    }
  });
}

// Shared memory of the reduction: x and dx of one row, and the norm's two scalars.
DC_HD inline int64_t reduce_smem_floats() { return 2 * kMaxKeyDim + 2; }

// The reduction for one (token, key head), run by one CTA: item = token * H + key head. For a
// live token: dq and dk (the partials summed over the group's value heads, then value blocks, each
// in order; through the norm: dx = factor r (dx_hat - x_hat (x_hat . dx_hat)), factor = scale for
// q), and dbeta, dg of the group's value heads. For a dead token: zeros in dq, dk, dv, dg, dbeta.
template <typename T, typename Exec>
DC_HD void reduce_token(Exec& ex, const Args& a, int64_t item, float* smem) {
  const int K = a.key_dim;
  const int64_t H = a.num_heads, HV = a.num_value_heads, group = HV / H, nvb = a.num_value_blocks;
  const int64_t tok = item / H, kh = item % H;
  const int64_t qk_row = (tok * H + kh) * K;
  float* x = smem;
  float* dx = x + kMaxKeyDim;
  float* scalars = dx + kMaxKeyDim;  // r, x_hat . dx_hat
  if (!a.live[tok]) {
    ex.each([&](int tid, Regs&) {
      if (tid < K) {
        static_cast<T*>(a.dq)[qk_row + tid] = from_f32<T>(0.0f);
        static_cast<T*>(a.dk)[qk_row + tid] = from_f32<T>(0.0f);
      }
      for (int64_t m = 0; m < group; ++m) {
        const int64_t vh = tok * HV + kh * group + m;
        for (int64_t c = tid; c < a.value_dim; c += kThreads)
          static_cast<T*>(a.dv)[vh * a.value_dim + c] = from_f32<T>(0.0f);
      }
      for (int64_t m = tid; m < group; m += kThreads) {
        a.dg[tok * HV + kh * group + m] = 0.0f;
        static_cast<T*>(a.dbeta)[tok * HV + kh * group + m] = from_f32<T>(0.0f);
      }
    });
    return;
  }
  for (int pass = 0; pass < 2; ++pass) {
    const T* src = static_cast<const T*>(pass == 0 ? a.q : a.k);
    const float* part = pass == 0 ? a.dq_part : a.dk_part;
    ex.each([&](int tid, Regs&) {
      if (tid < K) {
        float sum = 0.0f;
        for (int64_t m = 0; m < group; ++m)
          for (int64_t vb = 0; vb < nvb; ++vb)
            sum += part[((tok * HV + kh * group + m) * nvb + vb) * K + tid];
        dx[tid] = sum;
        x[tid] = to_f32(src[qk_row + tid]);
      }
      if (pass == 0) {
        for (int64_t m = tid; m < group; m += kThreads) {
          const int64_t vh = tok * HV + kh * group + m;
          float dg = 0.0f, dbeta = 0.0f;
          for (int64_t vb = 0; vb < nvb; ++vb) {
            dg += a.dg_part[vh * nvb + vb];
            dbeta += a.dbeta_part[vh * nvb + vb];
          }
          a.dg[vh] = dg;
          static_cast<T*>(a.dbeta)[vh] = from_f32<T>(dbeta);
        }
      }
    });
    ex.each([&](int tid, Regs&) {
      if (tid != 0) return;
      if (!a.use_qk_l2norm) {
        scalars[0] = 1.0f, scalars[1] = 0.0f;
        return;
      }
      float ss = 0.0f;
      for (int d = 0; d < K; ++d) ss += x[d] * x[d];
      const float r = rsqrt_f32(ss + 1e-6f);
      float proj = 0.0f;
      for (int d = 0; d < K; ++d) proj += (x[d] * r) * dx[d];
      scalars[0] = r, scalars[1] = proj;
    });
    ex.each([&](int tid, Regs&) {
      if (tid >= K) return;
      const float r = scalars[0], proj = scalars[1];
      const float factor = pass == 0 ? a.scale : 1.0f;
      const float x_hat = a.use_qk_l2norm ? x[tid] * r : 0.0f;
      static_cast<T*>(pass == 0 ? a.dq : a.dk)[qk_row + tid] =
          from_f32<T>(factor * r * (dx[tid] - x_hat * proj));
    });
  }
}

// ---- host side: the kernel arguments and the workspace, shared by the launcher and the host
// emulation
// ----------------------------------------------------------------------------------------

// The arguments of p (device or host pointers alike), without the workspace.
inline Args make_args(const GatedDeltaRuleBackwardParams& b) {
  const GatedDeltaRuleParams& p = b.forward;
  Args a{};
  a.seq_len = p.seq_len;
  a.num_heads = p.num_heads;
  a.num_value_heads = p.num_value_heads;
  a.key_dim = static_cast<int>(p.key_dim);
  a.value_dim = p.value_dim;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.g = p.g;
  a.beta = p.beta;
  a.d_output = b.d_output;
  a.d_final_state = b.d_final_state;
  a.cu_seqlens = p.cu_seqlens;
  a.num_seqs = num_sequences(p.batch, p.cu_seqlens, p.num_seqs);
  a.initial_state = p.initial_state;
  a.state_slots = p.state_slots;
  a.num_state_rows = p.num_state_rows > 0 ? p.num_state_rows : a.num_seqs;
  a.dq = b.dq;
  a.dk = b.dk;
  a.dv = b.dv;
  a.dg = b.dg;
  a.dbeta = b.dbeta;
  a.dh0 = b.dh0;
  a.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.key_dim));
  a.use_qk_l2norm = p.use_qk_l2norm;
  a.block_len = static_cast<int>(p.chunk_size);
  a.num_value_blocks = (p.value_dim + kLanes - 1) / kLanes;
  a.num_items = a.num_seqs * p.num_value_heads * a.num_value_blocks;
  a.num_tokens = p.batch * p.seq_len;
  return a;
}

// Points a's workspace into `base` for a grid of `ctas` backward CTAs (base nullptr: only counts)
// and returns its size in bytes; every part starts on a 256-byte boundary.
inline int64_t carve_workspace(Args& a, int64_t ctas, char* base) {
  const int64_t K = a.key_dim, HV = a.num_value_heads, nvb = a.num_value_blocks;
  const int64_t T = a.num_tokens;
  int64_t used = 0;
  auto take = [&](int64_t bytes) {
    char* at = base ? base + used : nullptr;
    used += (bytes + 255) / 256 * 256;
    return at;
  };
  const int64_t f = sizeof(float);
  a.checkpoints = reinterpret_cast<float*>(
      take(num_checkpoints(a.num_seqs, T, a.block_len) * HV * nvb * K * kLanes * f));
  a.block_states =
      reinterpret_cast<float*>(take(ctas * block_state_floats(a.key_dim, a.block_len) * f));
  a.dq_part = reinterpret_cast<float*>(take(T * HV * nvb * K * f));
  a.dk_part = reinterpret_cast<float*>(take(T * HV * nvb * K * f));
  a.dbeta_part = reinterpret_cast<float*>(take(T * HV * nvb * f));
  a.dg_part = reinterpret_cast<float*>(take(T * HV * nvb * f));
  a.live = reinterpret_cast<uint8_t*>(take(T));
  return used;
}

}  // namespace deltacheck::kernels::cuda::gdr_bwd
