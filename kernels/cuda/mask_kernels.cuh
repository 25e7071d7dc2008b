// Device code of the mask builder and of the segment derivation. Included only by mask.cu.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_utils.cuh"

namespace deltacheck::kernels::cuda::mask {

constexpr int kThreads = 256;
constexpr int kSegmentThreads = 1024;

struct KernelArgs {
  int64_t batch, q_len, kv_length;
  int64_t q_offset;
  const int64_t* q_offsets;
  bool causal;
  int64_t sliding_window, chunk_size;
  const uint8_t* padding_mask;
  const int64_t* position_ids;  // row 0 of [rows, B, q_len]
  uint8_t* out;
  int64_t num_rows;  // batch * q_len
};

// Whether new token j (j >= 1) of batch row b starts a segment.
__device__ inline bool starts_segment(const KernelArgs& a, int64_t b, int64_t j) {
  const int64_t* pos = a.position_ids + b * a.q_len;
  return pos[j] != pos[j - 1] + 1;
}

// One CTA per (batch row, query row), grid-stride over rows. Pass 1 reduces over the row what the
// rules need beyond (q, kv): the left padding lp and the query's segment [seg_begin, seg_end) in
// new-token indices. Pass 2 writes the row, each key independently.
__global__ void __launch_bounds__(kThreads) bool_mask_kernel(KernelArgs a) {
  int64_t* scratch = reinterpret_cast<int64_t*>(dynamic_shared_memory());  // one per warp
  for (int64_t row = blockIdx.x; row < a.num_rows; row += gridDim.x) {
    const int64_t b = row / a.q_len, q = row % a.q_len;
    const int64_t offset = a.q_offsets ? a.q_offsets[b] : a.q_offset;
    const int64_t q_abs = offset + q;

    int64_t lp = 0;  // leading zeros of the padding row
    if (a.chunk_size > 0 && a.padding_mask) {
      int64_t first_real = a.kv_length;
      for (int64_t kv = threadIdx.x; kv < a.kv_length; kv += blockDim.x) {
        if (a.padding_mask[b * a.kv_length + kv] != 0 && kv < first_real) first_real = kv;
      }
      lp = block_reduce(first_real, scratch, MinOp{});
    }
    int64_t seg_begin = 0, seg_end = a.q_len;  // the query's segment, in new-token indices
    if (a.position_ids) {
      int64_t begin = 0, end = a.q_len;
      for (int64_t j = 1 + threadIdx.x; j < a.q_len; j += blockDim.x) {
        if (!starts_segment(a, b, j)) continue;
        if (j <= q && j > begin) begin = j;
        if (j > q && j < end) end = j;
      }
      seg_begin = block_reduce(begin, scratch, MaxOp{});
      seg_end = block_reduce(end, scratch, MinOp{});
    }

    uint8_t* out = a.out + row * a.kv_length;
    for (int64_t kv = threadIdx.x; kv < a.kv_length; kv += blockDim.x) {
      bool allowed = true;
      if (a.causal) allowed = allowed && kv <= q_abs;
      if (a.sliding_window > 0) allowed = allowed && kv > q_abs - a.sliding_window;
      if (a.chunk_size > 0) {
        allowed =
            allowed && floor_div(kv - lp, a.chunk_size) == floor_div(q_abs - lp, a.chunk_size);
      }
      if (a.padding_mask) allowed = allowed && a.padding_mask[b * a.kv_length + kv] != 0;
      if (a.position_ids) {
        // Keys before the new tokens are the cached prefix, which segment 0 continues; keys past
        // them are in no segment.
        bool same;
        if (kv < offset) {
          same = seg_begin == 0;
        } else if (kv < offset + a.q_len) {
          same = kv - offset >= seg_begin && kv - offset < seg_end;
        } else {
          same = false;
        }
        allowed = allowed && same;
      }
      out[kv] = allowed ? 1 : 0;
    }
  }
}

struct SegmentArgs {
  const int64_t* position_ids;
  int64_t len, total;  // tokens per row, batch * len
  int64_t* cu_seqlens;
  int64_t* sequence_index;
  int64_t* num_segments;
  int64_t* max_seqlen;
};

// A single CTA walks the flattened tokens in tiles of blockDim.x: flag segment starts, scan the
// flags, and record where each segment starts. Then the maximum length over the segments.
__global__ void __launch_bounds__(kSegmentThreads) segments_kernel(SegmentArgs a) {
  int64_t* scratch = reinterpret_cast<int64_t*>(dynamic_shared_memory());  // one per warp
  int64_t segments = 0;  // segments started before the current tile
  for (int64_t tile = 0; tile < a.total; tile += blockDim.x) {
    const int64_t t = tile + threadIdx.x;
    bool start = false;
    if (t < a.total) {
      start = t % a.len == 0 || a.position_ids[t] != a.position_ids[t - 1] + 1;
    }
    const ScanResult scan = block_inclusive_scan(start ? 1 : 0, scratch);
    if (t < a.total) {
      const int64_t seg = segments + scan.inclusive - 1;
      if (start) a.cu_seqlens[seg] = t;
      if (a.sequence_index) a.sequence_index[t] = seg;
    }
    segments += scan.total;
  }
  if (threadIdx.x == 0) {
    a.cu_seqlens[segments] = a.total;
    *a.num_segments = segments;
  }
  __syncthreads();  // makes the cu_seqlens writes of the whole block visible to it
  if (a.max_seqlen) {
    int64_t longest = 0;
    for (int64_t i = threadIdx.x; i < segments; i += blockDim.x) {
      const int64_t n = a.cu_seqlens[i + 1] - a.cu_seqlens[i];
      if (n > longest) longest = n;
    }
    longest = block_reduce(longest, scratch, MaxOp{});
    if (threadIdx.x == 0) *a.max_seqlen = longest;
  }
}

}  // namespace deltacheck::kernels::cuda::mask
