// kernels/torch/mask_builder through the shared mask adapter (harness/mask_adapter.h).
#include "harness/backends/torch/torch_mask_adapter.h"

#include <exception>

#include "cases/mask_case.h"
#include "harness/mask_adapter.h"
#include "kernels/torch/mask_builder.h"

namespace deltacheck::harness {
namespace {

struct TorchMaskApi {
  using Params = kernels::torch::MaskParams;
  using AdditiveFill = kernels::torch::AdditiveFill;
  using LayerMaskKind = kernels::torch::LayerMaskKind;
  using LayerMasks = kernels::torch::LayerMasks;
  using PackedSegments = kernels::torch::PackedSegments;
  using Unpadded = kernels::torch::Unpadded;
  static Status build_bool_mask(const Params& p, uint8_t* out) {
    return kernels::torch::build_bool_mask(p, out);
  }
  static Status build_additive_mask(const Params& p, AdditiveFill f, float* out) {
    return kernels::torch::build_additive_mask(p, f, out);
  }
  static Status mask_needed(const Params& p, bool* needed) {
    return kernels::torch::mask_needed(p, needed);
  }
  static Status fully_masked_rows(const Params& p, uint8_t* out) {
    return kernels::torch::fully_masked_rows(p, out);
  }
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    return kernels::torch::layer_masks(types, p, out);
  }
  static Status sequence_index_from_cu_seqlens(const int64_t* cu, int64_t n, int64_t* out) {
    return kernels::torch::sequence_index_from_cu_seqlens(cu, n, out);
  }
  static Status segments_from_position_ids(const int64_t* pos, int64_t batch, int64_t len,
                                           PackedSegments* out) {
    return kernels::torch::segments_from_position_ids(pos, batch, len, out);
  }
  static Status unpad(const uint8_t* mask, int64_t batch, int64_t len, Unpadded* out) {
    return kernels::torch::unpad(mask, batch, len, out);
  }
};

}  // namespace

bool torch_mask_supports(const cases::Case& c) { return cases::is_mask_op(c.op()); }

Status run_torch_mask_case(const cases::Case& c, const cases::TensorMap& in,
                           cases::TensorMap& out) {
  try {
    return run_mask_case_with<TorchMaskApi>(c, in, out);
  } catch (const std::exception& e) {  // the builder guards ATen calls; this is the backstop
    return Status::Internal(std::string("torch mask builder: ") + e.what());
  }
}

}  // namespace deltacheck::harness
