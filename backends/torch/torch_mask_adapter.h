// The LibTorch mask builder (kernels/torch/mask_builder: ATen tensor ops and broadcasting, the way
// Python frameworks build masks) behind the harness: the `torch` backend calls these two for the
// mask, layers and segments ops. The builder runs on the CPU whatever --device says (its API
// takes and returns host buffers). Outputs as ops/mask/problem.h lays them out.
#pragma once

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::backends {

// True for the case ops the LibTorch mask builder runs (mask, layers, segments).
bool torch_mask_supports(const cases::Case& c);

// Runs the case on the LibTorch builder; a builder error (e.g. "unknown layer type 'xyz' at
// layer 3") comes back as the Status, ATen exceptions as kInternal.
Status run_torch_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);

}  // namespace deltacheck::backends
