// The cuda component's entry point (include/deltacheck/cuda.h).
#include "deltacheck/cuda.h"

#include "backends/cuda/cuda_backend.h"

namespace deltacheck {

void register_cuda_backends() { backends::register_cuda_backends(); }

}  // namespace deltacheck
