// The CUDA backend, compiled only when the build has CUDA (DELTACHECK_HAVE_CUDA):
//   cuda  the kernels of kernels/cuda on the current CUDA device. Inputs are copied to the device,
//         the kernels run on a stream of the call's own, and the outputs come back into the
//         runner's tensors (guard bands and poison included, see device_tensors.h).
// Without a usable device every case is unsupported, "no CUDA device: <why>", never a pass.
#pragma once

#include <memory>

#include "backends/registry.h"

namespace deltacheck::backends {

// Adds the backend to the registry; later calls do nothing. The tool calls it at start-up
// (tools/deltacheck/optional_backends.cc), tests before make_backend("cuda").
void register_cuda_backends();

std::unique_ptr<Backend> make_cuda_backend();

// Whether kernels/cuda has a kernel for the case, judged from the case alone (no device needed):
// the part of the backend's supports() that follows the device check. Exposed for tests.
Support cuda_kernels_support(const cases::Case& c);

// The backend's paths per op (cuda_gdr.cc, cuda_gdr_grad.cc, cuda_mask.cc); the device must be
// usable.
Status run_cuda_gdr_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);
Status run_cuda_gdr_grad_case(const cases::Case& c, const cases::TensorMap& in,
                              cases::TensorMap& out);
Status run_cuda_mask_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out);

}  // namespace deltacheck::backends
