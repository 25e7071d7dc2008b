// The torch component's entry point (include/deltacheck/torch.h).
#include "deltacheck/torch.h"

#include "harness/backends/torch/torch_backend.h"

namespace deltacheck {

void register_torch_backends() { harness::register_torch_backends(); }

}  // namespace deltacheck
