// Device code of the causal depthwise convolution. Included only by causal_conv1d.cu.
//
// Position s of a sequence (s < 0: before its first token) reads x[bos + s] when s >= 0, else
// entry W-1+s of the sequence's initial conv state (oldest first), else zero. Nothing outside
// [bos, eos) of x is ever read, which is what keeps packed sequences apart.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_utils.cuh"

namespace deltacheck::kernels::cuda::conv {

constexpr int kMaxWidth = 8;
constexpr int kThreads = 256;

struct KernelArgs {
  int64_t seq_len, channels;
  int width;
  const void* x;
  void* out;
  const float* weight;
  const float* bias;
  bool silu;
  const int64_t* cu_seqlens;  // nullptr: num_seqs sequences of seq_len tokens each
  int64_t num_seqs;
  const float* initial_state;
  float* final_state;
  const int32_t* state_slots;
  int64_t num_state_rows;
  const uint8_t* has_initial_state;
};

struct Sequence {
  bool active;
  bool has_state;  // reads its initial conv state (else zeros)
  int64_t bos, len, slot;
};

// Bounds and slot of sequence n; inactive for a padding entry or out-of-range bounds / slot.
__device__ inline Sequence sequence(const KernelArgs& a, int64_t n) {
  Sequence s{};
  s.slot = a.state_slots ? static_cast<int64_t>(a.state_slots[n]) : n;
  s.active = s.slot >= 0 && s.slot < a.num_state_rows;
  s.has_state = a.initial_state && (!a.has_initial_state || a.has_initial_state[n] != 0);
  if (a.cu_seqlens) {
    s.bos = a.cu_seqlens[n];
    const int64_t eos = a.cu_seqlens[n + 1];
    s.len = eos - s.bos;
    s.active = s.active && s.bos >= 0 && s.len >= 0 && eos <= a.seq_len;
  } else {
    s.bos = n * a.seq_len;
    s.len = a.seq_len;
  }
  return s;
}

// The sequence holding flattened token t: the last n with cu_seqlens[n] <= t (zero-length
// sequences before it share its start and are passed over). Requires num_seqs >= 1.
__device__ inline int64_t sequence_of_token(const KernelArgs& a, int64_t t) {
  if (!a.cu_seqlens) return t / a.seq_len;
  int64_t lo = 0, hi = a.num_seqs;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.cu_seqlens[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Input at position s of sequence `seq`, channel d (see the file comment).
template <typename T>
__device__ inline float input_at(const KernelArgs& a, const Sequence& seq, int64_t s, int64_t d) {
  if (s >= 0) return to_float(static_cast<const T*>(a.x)[(seq.bos + s) * a.channels + d]);
  if (!seq.has_state) return 0.0f;
  const int64_t row = (seq.slot * a.channels + d) * (a.width - 1);
  return a.initial_state[row + (a.width - 1) + s];
}

__device__ inline float activate(const KernelArgs& a, float acc) {
  return a.silu ? silu(acc) : acc;
}

// out[t, d] for every flattened token t and channel d (channel fastest: coalesced).
template <typename T>
__global__ void __launch_bounds__(kThreads) prefill_kernel(KernelArgs a, int64_t num_tokens) {
  const int64_t total = num_tokens * a.channels;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / a.channels, d = e % a.channels;
    const Sequence seq = sequence(a, sequence_of_token(a, t));
    if (!seq.active || t < seq.bos || t >= seq.bos + seq.len) continue;
    const int64_t pos = t - seq.bos;
    float acc = a.bias ? a.bias[d] : 0.0f;
    for (int j = 0; j < a.width; ++j) {
      acc += a.weight[d * a.width + j] * input_at<T>(a, seq, pos - (a.width - 1) + j, d);
    }
    static_cast<T*>(a.out)[t * a.channels + d] = from_float<T>(activate(a, acc));
  }
}

// Final conv state of every (sequence, channel): the last W-1 inputs of [initial state, x]. All of
// them are read before any is written, so in place on the initial state is safe; launched after
// prefill_kernel, which reads the initial states.
template <typename T>
__global__ void __launch_bounds__(kThreads) final_state_kernel(KernelArgs a) {
  const int64_t total = a.num_seqs * a.channels;
  const int taps = a.width - 1;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = e / a.channels, d = e % a.channels;
    const Sequence seq = sequence(a, n);
    if (!seq.active) continue;
    float window[kMaxWidth - 1];
    for (int i = 0; i < taps; ++i) window[i] = input_at<T>(a, seq, seq.len - taps + i, d);
    float* dst = a.final_state + (seq.slot * a.channels + d) * taps;
    for (int i = 0; i < taps; ++i) dst[i] = window[i];
  }
}

struct UpdateArgs {
  int64_t num_seqs, channels;
  int width;
  const void* x;
  void* out;
  const float* weight;
  const float* bias;
  bool silu;
  float* state;
  const int32_t* state_slots;
  int64_t num_state_rows;
};

// Decode: one thread per (sequence, channel) shifts its row of the state in place.
template <typename T>
__global__ void __launch_bounds__(kThreads) update_kernel(UpdateArgs a) {
  const int64_t total = a.num_seqs * a.channels;
  const int taps = a.width - 1;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = e / a.channels, d = e % a.channels;
    const int64_t slot = a.state_slots ? static_cast<int64_t>(a.state_slots[n]) : n;
    if (slot < 0 || slot >= a.num_state_rows) continue;
    float* row = taps > 0 ? a.state + (slot * a.channels + d) * taps : nullptr;  // oldest first
    const float xt = to_float(static_cast<const T*>(a.x)[n * a.channels + d]);
    float acc = a.bias ? a.bias[d] : 0.0f;
    for (int j = 0; j < taps; ++j) acc += a.weight[d * a.width + j] * row[j];
    acc += a.weight[d * a.width + taps] * xt;
    static_cast<T*>(a.out)[n * a.channels + d] = from_float<T>(a.silu ? silu(acc) : acc);
    for (int j = 0; j + 1 < taps; ++j) row[j] = row[j + 1];
    if (taps > 0) row[taps - 1] = xt;
  }
}

}  // namespace deltacheck::kernels::cuda::conv
