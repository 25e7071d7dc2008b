// Device code of the gated delta rule: the chunked prefill kernel and the recurrent kernel.
// Included only by gated_delta_rule.cu; the host side (checks, launch) lives there.
//
// Work decomposition (both kernels): one work item per (sequence, value head, block of kBlockV
// value columns). The columns of the state S [K, V] evolve independently under the rule (every
// coupling goes through k, beta and g), so a CTA owns the slice S[:, v0 : v0 + 32] alone, and
// in-place updates of a state pool need no synchronization beyond distinct slots. Items are
// flattened into grid.x (2^31 - 1), with a grid-stride loop beyond that, and every offset is
// 64-bit.
//
// Chunked form, per chunk of L <= 64 tokens starting from state S0 (G = within-chunk cumulative g):
//   A[i][j] = beta_i exp(G_i - G_j) k_i.k_j              (j < i)
//   R[i]    = beta_i (v_i - exp(G_i) S0^T k_i)
//   U       = (I + A)^-1 R                               (forward substitution, per column)
//   o_i     = exp(G_i) S0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i.k_j) U_j
//   S       = exp(G_last) S0 + sum_j exp(G_last - G_j) k_j U_j^T
// Decays are only ever exp(G_i - G_j) with j <= i (or exp(G_i)): exponents of non-positive numbers
// for g <= 0, so an underflowing tail chunk gives zeros, never 0 * inf. G is accumulated in double:
// with strong decay G reaches several hundred within a chunk, where fp32 spacing is ~6e-5, and a
// float difference G_i - G_j carries that into exp() (in the strong-decay test: 8x the output
// error of the fp32 recurrence instead of under 2x).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_utils.cuh"

namespace deltacheck::kernels::cuda::gdr {

constexpr int kChunk = 64;   // tokens per chunk (the largest chunk_size supported)
constexpr int kBlockV = 32;  // value columns per CTA: one per lane
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMaxKeyDim = 128;  // q/k tiles and per-thread state rows are sized for this
constexpr int kRowsPerThread = kChunk / kWarps;  // chunk rows per thread in row x column work
constexpr int kKeyRowsPerThread = kMaxKeyDim / kWarps;  // state rows per thread
// Row stride of U: the forward substitution has lane (part p, column group g) of warp w read
// U[p + 8m][4w + g]; with a stride of 36 floats that is bank (4p + g + 4w) mod 32, distinct for
// the 32 lanes.
constexpr int kUStride = kBlockV + 4;

// Row stride of the q and k tiles: odd, so lanes reading the same column of 32 different rows hit
// 32 different banks.
__host__ __device__ constexpr int padded_key_stride(int key_dim) { return key_dim | 1; }

// Shared memory of the chunked kernel, in bytes (doubles first, for alignment).
__host__ __device__ constexpr int64_t chunked_smem_bytes(int key_dim) {
  return kChunk * 8                                        // G (double)
         + 4 * (2 * kChunk                                 // beta, decay-to-end
                + 2 * kChunk * padded_key_stride(key_dim)  // q, k tiles
                + key_dim * kBlockV                        // state slice
                + kChunk * kChunk                          // A, then the q.k decays
                + kChunk * kUStride);                      // R, then U
}

// Shared memory of the recurrent kernel, in bytes: q, k and the two per-warp partial sums.
__host__ __device__ constexpr int64_t recurrent_smem_bytes(int key_dim) {
  return 4 * (2 * key_dim + 2 * kWarps * kBlockV);
}

struct KernelArgs {
  int64_t seq_len, num_heads, num_value_heads;
  int key_dim;
  int64_t value_dim;
  const void* q;
  const void* k;
  const void* v;
  const float* g;
  const void* beta;
  void* o;
  const int64_t* cu_seqlens;  // nullptr: num_seqs = B sequences of seq_len tokens
  int64_t num_seqs;
  const float* initial_state;
  float* final_state;
  const int32_t* state_slots;
  int64_t num_state_rows;
  float* token_states;  // recurrent only: [N, T, HV, K, V]
  // Recurrent only, the serving decode contracts (gated_delta_rule.h, RecurrentDecodeParams):
  // token_rows [N, T] = state_indices, rows of initial_state (the pool, written in place).
  const int32_t* token_rows;
  const int32_t* num_accepted;  // accept: the start row is token_rows[i, num_accepted[i] - 1]
  const int32_t* parents;       // tree: each token from its parent's row (-1: the slot's row)
  float scale;
  bool use_qk_l2norm;
  int chunk_size;
  int64_t num_value_blocks;
  int64_t num_items;  // num_seqs * HV * num_value_blocks
};

struct WorkItem {
  bool active;
  int64_t seq, head, qk_head;
  int64_t bos, len;  // first token in the flattened [B * T] token axis, and length
  int64_t slot;
  int64_t v0;
  int vcols;  // valid columns of this value block, 1..32
};

// Decodes item into its sequence, head and value block. A padding entry (negative slot) and a
// sequence whose bounds or slot are out of range come back inactive: nothing of them is touched.
__device__ inline WorkItem resolve_item(const KernelArgs& a, int64_t item) {
  WorkItem w{};
  const int64_t vb = item % a.num_value_blocks;
  const int64_t rest = item / a.num_value_blocks;
  w.head = rest % a.num_value_heads;
  w.seq = rest / a.num_value_heads;
  w.qk_head = w.head / (a.num_value_heads / a.num_heads);
  w.slot = a.state_slots ? static_cast<int64_t>(a.state_slots[w.seq]) : w.seq;
  if (a.token_rows && !a.parents) {  // accept: the start row of the accepted token
    const int64_t accepted = a.num_accepted ? a.num_accepted[w.seq] : 1;
    w.slot = accepted >= 1 && accepted <= a.seq_len
                 ? static_cast<int64_t>(a.token_rows[w.seq * a.seq_len + accepted - 1])
                 : -1;
  }
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
  w.v0 = vb * kBlockV;
  const int64_t cols = a.value_dim - w.v0;
  w.vcols = static_cast<int>(cols < kBlockV ? cols : kBlockV);
  return w;
}

__device__ inline int64_t state_offset(const KernelArgs& a, const WorkItem& w) {
  return (w.slot * a.num_value_heads + w.head) * a.key_dim * a.value_dim;
}

// Loads q or k of one token into a shared row (fp32), with the optional L2 norm and a factor.
// Called by a whole warp; each lane rescales only the elements it wrote.
template <typename T>
__device__ void load_qk_row(const KernelArgs& a, const T* src, int64_t token, int64_t head,
                            float factor, float* dst) {
  const int lane = threadIdx.x % kWarpSize;
  const T* row = src + (token * a.num_heads + head) * a.key_dim;
  float ss = 0.0f;
  for (int d = lane; d < a.key_dim; d += kWarpSize) {
    const float x = to_float(row[d]);
    dst[d] = x;
    ss += x * x;
  }
  if (a.use_qk_l2norm) factor *= 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
  for (int d = lane; d < a.key_dim; d += kWarpSize) dst[d] *= factor;
}

// Loads the state slice S[:, v0 : v0 + vcols] (zeros where there is no initial state and in the
// columns past vcols) as [K][kBlockV].
__device__ inline void load_state_slice(const KernelArgs& a, const WorkItem& w, float* s) {
  const float* src = a.initial_state ? a.initial_state + state_offset(a, w) : nullptr;
  for (int idx = threadIdx.x; idx < a.key_dim * kBlockV; idx += blockDim.x) {
    const int d = idx / kBlockV, c = idx % kBlockV;
    s[idx] = (src && c < w.vcols) ? src[d * a.value_dim + w.v0 + c] : 0.0f;
  }
}

__device__ inline void store_state_slice(const KernelArgs& a, const WorkItem& w, const float* s) {
  if (!a.final_state) return;
  float* dst = a.final_state + state_offset(a, w);
  for (int idx = threadIdx.x; idx < a.key_dim * kBlockV; idx += blockDim.x) {
    const int d = idx / kBlockV, c = idx % kBlockV;
    if (c < w.vcols) dst[d * a.value_dim + w.v0 + c] = s[idx];
  }
}

// out[i][j] = coef_i exp(G_i - G_j) x_i.k_j for j < i (strict) or j <= i, 0 above; rows and
// columns < L. Thread (warp, lane) computes rows warp + 8r and columns lane, lane + 32.
__device__ inline void decayed_gram(const float* x, const float* k, const double* G,
                                    const float* coef, int key_stride, int key_dim, int L,
                                    bool strict, float* out) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float acc[kRowsPerThread][2] = {};
  for (int d = 0; d < key_dim; ++d) {
    const float k0 = k[lane * key_stride + d];
    const float k1 = k[(lane + kWarpSize) * key_stride + d];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const float xi = x[(warp + kWarps * r) * key_stride + d];
      acc[r][0] += xi * k0;
      acc[r][1] += xi * k1;
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = warp + kWarps * r;
    if (i >= L) continue;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int j = lane + kWarpSize * s;
      if (j >= L) continue;
      const bool below = strict ? j < i : j <= i;
      const float c = coef ? coef[i] : 1.0f;
      out[i * kChunk + j] = below ? c * expf(static_cast<float>(G[i] - G[j])) * acc[r][s] : 0.0f;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) chunked_kernel(KernelArgs a) {
  const int K = a.key_dim;
  const int KP = padded_key_stride(K);
  unsigned char* smem = dynamic_shared_memory();
  double* sG = reinterpret_cast<double*>(smem);
  float* sBeta = reinterpret_cast<float*>(sG + kChunk);
  float* sDecay = sBeta + kChunk;    // exp(G_last - G_j)
  float* sQ = sDecay + kChunk;       // [kChunk][KP], normalized and scaled
  float* sK = sQ + kChunk * KP;      // [kChunk][KP], normalized
  float* sS = sK + kChunk * KP;      // [K][kBlockV]
  float* sA = sS + K * kBlockV;      // [kChunk][kChunk]
  float* sU = sA + kChunk * kChunk;  // [kChunk][kUStride]

  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* beta = static_cast<const T*>(a.beta);
  T* o = static_cast<T*>(a.o);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t HV = a.num_value_heads;

  for (int64_t item = blockIdx.x; item < a.num_items; item += gridDim.x) {
    const WorkItem w = resolve_item(a, item);
    if (!w.active) continue;  // uniform across the block
    load_state_slice(a, w, sS);
    __syncthreads();

    for (int64_t c0 = 0; c0 < w.len; c0 += a.chunk_size) {
      const int64_t rem = w.len - c0;
      const int L = static_cast<int>(rem < a.chunk_size ? rem : a.chunk_size);
      const int64_t tok0 = w.bos + c0;  // first token of the chunk

      // Phase 1: q, k rows (one warp per row), cumulative gates and beta (warp 0).
      if (warp == 0) {
        double g0 = lane < L ? static_cast<double>(a.g[(tok0 + lane) * HV + w.head]) : 0.0;
        double g1 = lane + kWarpSize < L
                        ? static_cast<double>(a.g[(tok0 + lane + kWarpSize) * HV + w.head])
                        : 0.0;
        for (int offset = 1; offset < kWarpSize; offset *= 2) {
          const double y0 = __shfl_up_sync(kFullWarp, g0, offset);
          const double y1 = __shfl_up_sync(kFullWarp, g1, offset);
          if (lane >= offset) g0 += y0, g1 += y1;
        }
        g1 += __shfl_sync(kFullWarp, g0, kWarpSize - 1);
        sG[lane] = g0;
        sG[lane + kWarpSize] = g1;
        sBeta[lane] = lane < L ? to_float(beta[(tok0 + lane) * HV + w.head]) : 0.0f;
        sBeta[lane + kWarpSize] =
            lane + kWarpSize < L ? to_float(beta[(tok0 + lane + kWarpSize) * HV + w.head]) : 0.0f;
      }
      for (int t = warp; t < kChunk; t += kWarps) {
        if (t < L) {
          load_qk_row(a, q, tok0 + t, w.qk_head, a.scale, sQ + t * KP);
          load_qk_row(a, k, tok0 + t, w.qk_head, 1.0f, sK + t * KP);
        } else {
          // Rows past the chunk only ever meet discarded accumulators; zeros keep them finite.
          for (int d = lane; d < KP; d += kWarpSize) sQ[t * KP + d] = sK[t * KP + d] = 0.0f;
        }
      }
      __syncthreads();

      // Phase 2: A (strictly lower) and R = beta (v - exp(G) K S0).
      decayed_gram(sK, sK, sG, sBeta, KP, K, L, /*strict=*/true, sA);
      {
        float acc[kRowsPerThread] = {};
        for (int d = 0; d < K; ++d) {
          const float s = sS[d * kBlockV + lane];
#pragma unroll
          for (int r = 0; r < kRowsPerThread; ++r) acc[r] += sK[(warp + kWarps * r) * KP + d] * s;
        }
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const int j = warp + kWarps * r;
          if (j >= L) continue;
          float rj = 0.0f;
          if (lane < w.vcols) {
            const float vj = to_float(v[((tok0 + j) * HV + w.head) * a.value_dim + w.v0 + lane]);
            rj = sBeta[j] * (vj - expf(static_cast<float>(sG[j])) * acc[r]);
          }
          sU[j * kUStride + lane] = rj;
        }
      }
      __syncthreads();

      // Phase 3: U = (I + A)^-1 R by forward substitution, U_i = R_i - sum_{j<i} A_ij U_j. Each
      // column is solved by 8 lanes of one warp (4 columns per warp), so rows only need __syncwarp.
      {
        const int part = lane % 8;
        float* ucol = sU + warp * 4 + lane / 8;
        for (int i = 1; i < L; ++i) {
          float partial = 0.0f;
          for (int j = part; j < i; j += 8) partial += sA[i * kChunk + j] * ucol[j * kUStride];
          partial += __shfl_xor_sync(kFullWarp, partial, 4);
          partial += __shfl_xor_sync(kFullWarp, partial, 2);
          partial += __shfl_xor_sync(kFullWarp, partial, 1);
          if (part == 0) ucol[i * kUStride] -= partial;
          __syncwarp();
        }
      }
      __syncthreads();

      // Phase 4: sA <- exp(G_i - G_j) q_i.k_j (j <= i); decay of each token to the chunk end.
      decayed_gram(sQ, sK, sG, nullptr, KP, K, L, /*strict=*/false, sA);
      if (static_cast<int>(threadIdx.x) < L) {
        sDecay[threadIdx.x] = expf(static_cast<float>(sG[L - 1] - sG[threadIdx.x]));
      }
      __syncthreads();

      // Phase 5: o_i = exp(G_i) S0^T q_i + sum_{j<=i} sA[i][j] U_j (reads S0: before phase 6).
      {
        float acc[kRowsPerThread] = {};
        for (int d = 0; d < K; ++d) {
          const float s = sS[d * kBlockV + lane];
#pragma unroll
          for (int r = 0; r < kRowsPerThread; ++r) acc[r] += sQ[(warp + kWarps * r) * KP + d] * s;
        }
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const int i = warp + kWarps * r;
          acc[r] *= i < L ? expf(static_cast<float>(sG[i])) : 0.0f;
        }
        for (int j = 0; j < L; ++j) {
          const float u = sU[j * kUStride + lane];
#pragma unroll
          for (int r = 0; r < kRowsPerThread; ++r) {
            acc[r] += sA[(warp + kWarps * r) * kChunk + j] * u;  // 0 above the diagonal
          }
        }
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
          const int i = warp + kWarps * r;
          if (i < L && lane < w.vcols) {
            o[((tok0 + i) * HV + w.head) * a.value_dim + w.v0 + lane] = from_float<T>(acc[r]);
          }
        }
      }
      __syncthreads();

      // Phase 6: S = exp(G_last) S0 + sum_j exp(G_last - G_j) k_j U_j^T. Thread (warp, lane)
      // owns rows warp + 8r of column lane, so it may overwrite them in place.
      {
        const float elast = expf(static_cast<float>(sG[L - 1]));
        float acc[kKeyRowsPerThread];
#pragma unroll
        for (int r = 0; r < kKeyRowsPerThread; ++r) {
          const int d = warp + kWarps * r;
          acc[r] = d < K ? elast * sS[d * kBlockV + lane] : 0.0f;
        }
        for (int j = 0; j < L; ++j) {
          const float u = sDecay[j] * sU[j * kUStride + lane];
#pragma unroll
          for (int r = 0; r < kKeyRowsPerThread; ++r) {
            const int d = warp + kWarps * r;
            if (d < K) acc[r] += sK[j * KP + d] * u;
          }
        }
#pragma unroll
        for (int r = 0; r < kKeyRowsPerThread; ++r) {
          const int d = warp + kWarps * r;
          if (d < K) sS[d * kBlockV + lane] = acc[r];
        }
      }
      __syncthreads();
    }

    store_state_slice(a, w, sS);
    __syncthreads();  // the next item reloads sS
  }
}

// The recurrence, token by token. Thread (warp, lane) keeps rows warp + 8r of column lane of the
// state slice in registers; the column sums S^T k and S^T q are reduced across warps in shared
// memory. Three barriers per token.
template <typename T>
__global__ void __launch_bounds__(kThreads) recurrent_kernel(KernelArgs a) {
  const int K = a.key_dim;
  float* sQ = reinterpret_cast<float*>(dynamic_shared_memory());
  float* sK = sQ + K;
  float* sPartK = sK + K;                     // [kWarps][kBlockV]
  float* sPartQ = sPartK + kWarps * kBlockV;  // [kWarps][kBlockV]

  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* beta = static_cast<const T*>(a.beta);
  T* o = static_cast<T*>(a.o);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t HV = a.num_value_heads;
  const int64_t KV = static_cast<int64_t>(K) * a.value_dim;

  for (int64_t item = blockIdx.x; item < a.num_items; item += gridDim.x) {
    const WorkItem w = resolve_item(a, item);
    if (!w.active) continue;  // uniform across the block
    const bool own_column = lane < w.vcols;
    float S[kKeyRowsPerThread];
    {
      const float* src = a.initial_state ? a.initial_state + state_offset(a, w) : nullptr;
#pragma unroll
      for (int r = 0; r < kKeyRowsPerThread; ++r) {
        const int d = warp + kWarps * r;
        S[r] = (src && d < K && own_column) ? src[d * a.value_dim + w.v0 + lane] : 0.0f;
      }
    }

    for (int64_t t = 0; t < w.len; ++t) {
      const int64_t tok = w.bos + t;
      if (a.parents) {
        // A tree token starts from its parent's row, which this thread wrote for its own
        // elements at the parent's step, or from the slot's row (only read).
        const int32_t parent = a.parents[w.seq * a.seq_len + t];
        const int64_t from =
            parent < 0 ? w.slot : static_cast<int64_t>(a.token_rows[w.seq * a.seq_len + parent]);
        const float* src = a.initial_state + (from * HV + w.head) * KV;
#pragma unroll
        for (int r = 0; r < kKeyRowsPerThread; ++r) {
          const int d = warp + kWarps * r;
          S[r] = (d < K && own_column) ? src[d * a.value_dim + w.v0 + lane] : 0.0f;
        }
      }
      if (warp == 0) load_qk_row(a, q, tok, w.qk_head, a.scale, sQ);
      if (warp == 1) load_qk_row(a, k, tok, w.qk_head, 1.0f, sK);
      __syncthreads();

      const float decay = expf(a.g[tok * HV + w.head]);
      const float b = to_float(beta[tok * HV + w.head]);
      float partial = 0.0f;
#pragma unroll
      for (int r = 0; r < kKeyRowsPerThread; ++r) {
        const int d = warp + kWarps * r;
        if (d < K) {
          S[r] *= decay;
          partial += sK[d] * S[r];
        }
      }
      sPartK[warp * kBlockV + lane] = partial;
      __syncthreads();

      float ks = 0.0f;
      for (int i = 0; i < kWarps; ++i) ks += sPartK[i * kBlockV + lane];
      const float vt =
          own_column ? to_float(v[(tok * HV + w.head) * a.value_dim + w.v0 + lane]) : 0.0f;
      const float u = b * (vt - ks);
      partial = 0.0f;
#pragma unroll
      for (int r = 0; r < kKeyRowsPerThread; ++r) {
        const int d = warp + kWarps * r;
        if (d < K) {
          S[r] += sK[d] * u;
          partial += sQ[d] * S[r];
        }
      }
      sPartQ[warp * kBlockV + lane] = partial;
      if (a.token_states && own_column) {
        float* dst = a.token_states + ((w.seq * a.seq_len + t) * HV + w.head) * KV + w.v0 + lane;
#pragma unroll
        for (int r = 0; r < kKeyRowsPerThread; ++r) {
          const int d = warp + kWarps * r;
          if (d < K) dst[d * a.value_dim] = S[r];
        }
      }
      if (a.token_rows && own_column) {
        const int64_t row = a.token_rows[w.seq * a.seq_len + t];
        if (row >= 0) {
          float* dst = a.final_state + (row * HV + w.head) * KV + w.v0 + lane;
#pragma unroll
          for (int r = 0; r < kKeyRowsPerThread; ++r) {
            const int d = warp + kWarps * r;
            if (d < K) dst[d * a.value_dim] = S[r];
          }
        }
      }
      __syncthreads();

      if (warp == 0 && own_column) {
        float acc = 0.0f;
        for (int i = 0; i < kWarps; ++i) acc += sPartQ[i * kBlockV + lane];
        o[(tok * HV + w.head) * a.value_dim + w.v0 + lane] = from_float<T>(acc);
      }
    }

    if (a.final_state && !a.token_rows && own_column) {
      float* dst = a.final_state + state_offset(a, w) + w.v0 + lane;
#pragma unroll
      for (int r = 0; r < kKeyRowsPerThread; ++r) {
        const int d = warp + kWarps * r;
        if (d < K) dst[d * a.value_dim] = S[r];
      }
    }
  }
}

}  // namespace deltacheck::kernels::cuda::gdr
