// The cuda backend's mask cases, for what kernels/cuda/mask.h builds on the device:
//   mask(format=bool)          the boolean mask from build_bool_mask; its fully masked rows are
//                              read off that mask on the host; the "needed" flag (may a framework
//                              skip the mask?) is a host-side decision on the parameters alone,
//                              made the way a CUDA framework makes it, by the CPU builder's rule
//                              (kernels/cpu/mask_builder)
//   segments(source=position)  cu_seqlens, sequence index, count and max_seqlen from
//                              segments_from_position_ids
// The rest (additive formats, layers, segments from cu_seqlens or a padding mask) is unsupported
// by cuda_kernels_support(), with the reason.
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_tensors.h"
#include "backends/mask_adapter.h"
#include "backends/mask_builders.h"
#include "kernels/cuda/mask.h"
#include "ops/mask/problem.h"

namespace deltacheck::backends {
namespace {

using cuda_backend::DeviceBuffer;
using cuda_backend::DeviceTensors;
namespace kc = kernels::cuda;

// Queues the boolean mask into its output mirror.
Status launch_mask(const MaskProblem& p, const DeviceTensors& out, DeviceBuffer& padding,
                   DeviceBuffer& positions, cudaStream_t stream) {
  kernels::MaskParams m = ops::mask::mask_params(p);
  m.padding_mask = nullptr;  // the host buffers; their device copies below
  m.position_ids = nullptr;
  if (p.padding_mask) {
    if (Status st = padding.upload(p.padding_mask, static_cast<size_t>(p.batch * p.kv_length),
                                   stream, "padding_mask");
        !st.ok())
      return st;
    m.padding_mask = static_cast<const uint8_t*>(padding.get());
  }
  if (p.position_ids) {
    const auto n = static_cast<size_t>(p.position_id_rows * p.batch * p.q_len);
    if (Status st = positions.upload(p.position_ids, n * sizeof(int64_t), stream, "position_ids");
        !st.ok())
      return st;
    m.position_ids = static_cast<const int64_t*>(positions.get());
  }
  return kc::build_bool_mask(m, out.at("mask").as<uint8_t>(), stream);
}

// The host-side outputs of a mask case, from the downloaded mask.
Status finish_mask(const MaskProblem& p, cases::TensorMap& out) {
  bool needed = true;
  if (Status st = kernels::cpu::mask_needed(ops::mask::mask_params(p), &needed); !st.ok())
    return st;
  out.at("needed").as<uint8_t>()[0] = needed ? 1 : 0;
  const uint8_t* mask = out.at("mask").as<uint8_t>();
  uint8_t* rows = out.at("fully_masked").as<uint8_t>();
  for (int64_t r = 0; r < p.batch * p.q_len; ++r) {
    const uint8_t* row = mask + r * p.kv_length;
    rows[r] = std::all_of(row, row + p.kv_length, [](uint8_t a) { return a == 0; }) ? 1 : 0;
  }
  return Status::Ok();
}

Status launch_segments(const MaskProblem& p, const DeviceTensors& out, DeviceBuffer& positions,
                       cudaStream_t stream) {
  const int64_t n = p.rows * p.len;
  if (Status st = positions.upload(p.segment_positions, static_cast<size_t>(n) * sizeof(int64_t),
                                   stream, "position_ids");
      !st.ok())
    return st;
  kc::SegmentParams s;
  s.position_ids = static_cast<const int64_t*>(positions.get());
  s.batch = p.rows;
  s.len = p.len;
  s.cu_seqlens = out.at("cu_seqlens").as<int64_t>();  // [n + 1]: the kernel's capacity
  s.sequence_index = out.at("sequence_index").as<int64_t>();
  s.num_segments = out.at("num_seqs").as<int64_t>();
  s.max_seqlen = out.at("max_seqlen").as<int64_t>();
  return kc::segments_from_position_ids(s, stream);
}

// The outputs are fixed-size (ops/mask/problem.h): entries of cu_seqlens past the count
// repeat the token count, which the kernel leaves to its caller.
Status finish_segments(const MaskProblem& p, cases::TensorMap& out) {
  const int64_t n = p.rows * p.len;
  const int64_t count = out.at("num_seqs").as<int64_t>()[0];
  if (count < 0 || count > n)
    return Status::Internal(
        fmt::format("malformed segments: the kernel found {} sequences in {} tokens", count, n));
  int64_t* cu = out.at("cu_seqlens").as<int64_t>();
  std::fill(cu + count + 1, cu + n + 1, n);
  return Status::Ok();
}

}  // namespace

Status run_cuda_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  MaskProblem p;
  try {
    p = mask_problem(c, in);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  const bool mask = p.op == "mask" && p.format == "bool";
  const bool segments = p.op == "segments" && p.source == "position";
  if (!mask && !segments) return Status::Unsupported(cuda_kernels_support(c).reason);

  cuda_backend::Stream stream;
  if (Status st = stream.create(); !st.ok()) return st;
  DeviceTensors dout;
  if (Status st = dout.upload(out, stream.get()); !st.ok()) return st;
  DeviceBuffer padding, positions;
  const Status launched = mask ? launch_mask(p, dout, padding, positions, stream.get())
                               : launch_segments(p, dout, positions, stream.get());
  const Status synced = stream.synchronize();  // before any buffer is freed
  if (!launched.ok()) return launched;
  if (!synced.ok()) return synced;
  if (Status st = dout.download(out, stream.get()); !st.ok()) return st;
  if (Status st = stream.synchronize(); !st.ok()) return st;
  return mask ? finish_mask(p, out) : finish_segments(p, out);
}

}  // namespace deltacheck::backends
