// Backends from optional libraries, registered when this build has them.
#include "tools/deltacheck/commands.h"
#ifdef DELTACHECK_HAVE_TORCH
#include "deltacheck/torch.h"
#endif
#ifdef DELTACHECK_HAVE_CUDA
#include "deltacheck/cuda.h"
#endif

namespace deltacheck::cli {

void register_optional_backends() {
#ifdef DELTACHECK_HAVE_TORCH
  deltacheck::register_torch_backends();
#endif
#ifdef DELTACHECK_HAVE_CUDA
  deltacheck::register_cuda_backends();
#endif
}

}  // namespace deltacheck::cli
