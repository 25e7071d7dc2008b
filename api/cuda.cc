// The cuda component's entry point (include/deltacheck/cuda.h).
#include "deltacheck/cuda.h"

#include "harness/backends/cuda/cuda_backend.h"

namespace deltacheck {

void register_cuda_backends() { harness::register_cuda_backends(); }

}  // namespace deltacheck
