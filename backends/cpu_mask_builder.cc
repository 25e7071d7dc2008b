// The `cpu` backend's mask path: kernels/cpu/mask_builder through the shared mask adapter.
#include "backends/mask_adapter.h"
#include "backends/mask_builders.h"
#include "ops/mask/params.h"

namespace deltacheck::backends {

bool is_mask_case(const cases::Case& c) { return ops::mask::is_mask_op(c.op()); }

Status run_cpu_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  return run_mask_case_with<CpuMaskApi>(c, in, out);
}

}  // namespace deltacheck::backends
