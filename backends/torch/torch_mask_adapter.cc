// kernels/torch/mask_builder through the shared mask adapter (backends/mask_adapter.h).
#include "backends/torch/torch_mask_adapter.h"

#include <exception>

#include "backends/mask_adapter.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/torch/mask_builder.h"
#include "ops/mask/params.h"

namespace deltacheck::backends {
namespace {

DELTACHECK_MASK_BUILDER_API(TorchMaskApi, kernels::torch);

}  // namespace

bool torch_mask_supports(const cases::Case& c) { return ops::mask::is_mask_op(c.op()); }

Status run_torch_mask_case(const cases::Case& c, const cases::TensorMap& in,
                           cases::TensorMap& out) {
  try {
    return run_mask_case_with<TorchMaskApi>(c, in, out);
  } catch (const std::exception& e) {  // the builder guards ATen calls; this is the backstop
    return Status::Internal(std::string("torch mask builder: ") + e.what());
  }
}

}  // namespace deltacheck::backends
