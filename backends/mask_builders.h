// The mask builders behind the backend interface: the CPU builder (kernels/cpu/mask_builder) as
// the `cpu` backend runs it, and the deliberately wrong builders derived from it
// (wrong_mask_backends.cc). The LibTorch builder's adapter is backends/torch/
// torch_mask_adapter.h; a CUDA builder gets its own Api struct the same way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/cpu/mask_builder.h"

namespace deltacheck::backends {

// kernels/cpu/mask_builder in the shape backends/mask_adapter.h takes.
DELTACHECK_MASK_BUILDER_API(CpuMaskApi, kernels::cpu);

// True for the case ops a mask builder runs (mask, layers, segments).
bool is_mask_case(const cases::Case& c);

// The `cpu` backend's path for mask cases.
Status run_cpu_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);

// wrong:mask-no-linear-rule, wrong:mask-ignore-packing, wrong:mask-static-by-used-length.
std::vector<std::unique_ptr<Backend>> make_wrong_mask_backends();

}  // namespace deltacheck::backends
