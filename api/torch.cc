// The torch component's entry point (include/deltacheck/torch.h).
#include "deltacheck/torch.h"

#include "backends/torch/torch_backend.h"

namespace deltacheck {

void register_torch_backends() { backends::register_torch_backends(); }

}  // namespace deltacheck
