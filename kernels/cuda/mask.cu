// Host side of the CUDA mask builder and segment derivation: checks and launch configuration.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cuda/device.h"
#include "kernels/cuda/mask.h"
#include "kernels/cuda/mask_kernels.cuh"

namespace deltacheck::kernels::cuda {

Status validate(const MaskParams& p) {
  if (p.batch < 0 || p.q_len < 0 || p.kv_length < 0)
    return Status::InvalidArgument("batch, q_len and kv_length must be >= 0");
  if (!p.q_offsets && (p.q_offset < 0 || p.q_offset + p.q_len > p.kv_length)) {
    return Status::InvalidArgument("q_offset " + std::to_string(p.q_offset) + " + q_len " +
                                   std::to_string(p.q_len) + " does not fit kv_length " +
                                   std::to_string(p.kv_length));
  }
  if (p.sliding_window < 0 || p.chunk_size < 0)
    return Status::InvalidArgument("sliding_window and chunk_size must be >= 0");
  if (!p.causal && (p.sliding_window > 0 || p.chunk_size > 0))
    return Status::InvalidArgument(
        "sliding_window and chunk_size are defined for causal masks only");
  if (p.position_id_rows < 1) return Status::InvalidArgument("position_id_rows must be >= 1");
  return Status::Ok();
}

Status build_bool_mask(const MaskParams& p, uint8_t* out, cudaStream_t stream) {
  if (Status st = validate(p); !st.ok()) return st;
  if (!out) return Status::InvalidArgument("out is required");
  mask::KernelArgs a{};
  a.batch = p.batch;
  a.q_len = p.q_len;
  a.kv_length = p.kv_length;
  a.q_offset = p.q_offset;
  a.q_offsets = p.q_offsets;
  a.causal = p.causal;
  a.sliding_window = p.sliding_window;
  a.chunk_size = p.chunk_size;
  a.padding_mask = p.padding_mask;
  a.position_ids = p.position_ids;  // row 0 comes first in [rows, B, q_len]
  a.out = out;
  a.num_rows = p.batch * p.q_len;
  if (a.num_rows == 0 || p.kv_length == 0) return Status::Ok();
  const auto grid =
      static_cast<unsigned>(std::min<int64_t>(a.num_rows, std::numeric_limits<int32_t>::max()));
  const size_t smem = sizeof(int64_t) * (mask::kThreads / kWarpSize);
  mask::bool_mask_kernel<<<grid, mask::kThreads, smem, stream>>>(a);
  return cuda_status(cudaGetLastError(), "launch of build_bool_mask");
}

Status segments_from_position_ids(const SegmentParams& p, cudaStream_t stream) {
  if (p.batch < 0 || p.len < 0) return Status::InvalidArgument("batch and len must be >= 0");
  if (!p.cu_seqlens || !p.num_segments)
    return Status::InvalidArgument("cu_seqlens and num_segments are required");
  const int64_t total = p.batch * p.len;
  if (total > 0 && !p.position_ids) return Status::InvalidArgument("position_ids are required");
  mask::SegmentArgs a{};
  a.position_ids = p.position_ids;
  a.len = p.len;
  a.total = total;
  a.cu_seqlens = p.cu_seqlens;
  a.sequence_index = p.sequence_index;
  a.num_segments = p.num_segments;
  a.max_seqlen = p.max_seqlen;
  const size_t smem = sizeof(int64_t) * (mask::kSegmentThreads / kWarpSize);
  mask::segments_kernel<<<1, mask::kSegmentThreads, smem, stream>>>(a);
  return cuda_status(cudaGetLastError(), "launch of segments_from_position_ids");
}

}  // namespace deltacheck::kernels::cuda
