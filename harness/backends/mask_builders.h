// The mask builders behind the backend interface: the CPU builder (kernels/cpu/mask_builder) as
// the `cpu` backend runs it, and the deliberately wrong builders derived from it
// (wrong_mask_backends.cc). The LibTorch builder's adapter is harness/backends/torch/
// torch_mask_adapter.h; a CUDA builder gets its own Api struct the same way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "kernels/cpu/mask_builder.h"

namespace deltacheck::harness {

// kernels/cpu/mask_builder in the shape harness/mask_adapter.h takes.
struct CpuMaskApi {
  using Params = kernels::cpu::MaskParams;
  using AdditiveFill = kernels::cpu::AdditiveFill;
  using LayerMaskKind = kernels::cpu::LayerMaskKind;
  using LayerMasks = kernels::cpu::LayerMasks;
  using PackedSegments = kernels::cpu::PackedSegments;
  using Unpadded = kernels::cpu::Unpadded;
  static Status build_bool_mask(const Params& p, uint8_t* out) {
    return kernels::cpu::build_bool_mask(p, out);
  }
  static Status build_additive_mask(const Params& p, AdditiveFill f, float* out) {
    return kernels::cpu::build_additive_mask(p, f, out);
  }
  static Status mask_needed(const Params& p, bool* needed) {
    return kernels::cpu::mask_needed(p, needed);
  }
  static Status fully_masked_rows(const Params& p, uint8_t* out) {
    return kernels::cpu::fully_masked_rows(p, out);
  }
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    return kernels::cpu::layer_masks(types, p, out);
  }
  static Status sequence_index_from_cu_seqlens(const int64_t* cu, int64_t n, int64_t* out) {
    return kernels::cpu::sequence_index_from_cu_seqlens(cu, n, out);
  }
  static Status segments_from_position_ids(const int64_t* pos, int64_t batch, int64_t len,
                                           PackedSegments* out) {
    return kernels::cpu::segments_from_position_ids(pos, batch, len, out);
  }
  static Status unpad(const uint8_t* mask, int64_t batch, int64_t len, Unpadded* out) {
    return kernels::cpu::unpad(mask, batch, len, out);
  }
};

// True for the case ops a mask builder runs (mask, layers, segments).
bool is_mask_case(const cases::Case& c);

// The `cpu` backend's path for mask cases.
Status run_cpu_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);

// wrong:mask-no-linear-rule, wrong:mask-ignore-packing, wrong:mask-static-by-used-length.
std::vector<std::unique_ptr<Backend>> make_wrong_mask_backends();

}  // namespace deltacheck::harness
