// The LibTorch backends, compiled only when LibTorch is found (DELTACHECK_HAVE_TORCH):
//   torch     the ATen kernels of kernels/torch on --device cpu | cuda, one entry per case op
//   torch-op  a custom operator from a shared library (--library, --op), called through the
//             calling convention of torch_op_convention.h (see README.md in this folder)
#pragma once

#include <memory>

#include "backends/registry.h"

namespace deltacheck::backends {

// Adds both backends to the registry; later calls do nothing. The tool calls it at start-up
// (tools/deltacheck/optional_backends.cc), tests before make_backend("torch").
void register_torch_backends();

std::unique_ptr<Backend> make_torch_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_torch_op_backend(const BackendOptions& options);

}  // namespace deltacheck::backends
