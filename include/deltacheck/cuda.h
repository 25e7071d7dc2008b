// The CUDA component (find_package(deltacheck COMPONENTS cuda), target deltacheck::cuda):
// deltacheck's CUDA backend, "cuda" (the kernels of kernels/cuda behind the Backend interface).
#pragma once

namespace deltacheck {

// Makes "cuda" known to make_backend() and list_backends(); later calls do nothing. Without a
// usable device its cases are unsupported ("no CUDA device"), never a pass.
void register_cuda_backends();

}  // namespace deltacheck
