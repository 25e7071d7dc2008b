// Backends from optional libraries, registered when this build has them.
#include "harness/cli/commands.h"
#ifdef DELTACHECK_HAVE_TORCH
#include "harness/backends/torch/torch_backend.h"
#endif
#ifdef DELTACHECK_HAVE_CUDA
#include "harness/backends/cuda/cuda_backend.h"
#endif

namespace deltacheck::cli {

void register_optional_backends() {
#ifdef DELTACHECK_HAVE_TORCH
  harness::register_torch_backends();
#endif
#ifdef DELTACHECK_HAVE_CUDA
  harness::register_cuda_backends();
#endif
}

}  // namespace deltacheck::cli
