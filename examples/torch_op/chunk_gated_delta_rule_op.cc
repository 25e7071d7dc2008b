// Example operator library for deltacheck's torch-op backend: registers
// deltacheck_example::chunk_gated_delta_rule, a CPU kernel for the calling convention that wraps
// the project's chunked CPU kernel, and its backward: an autograd kernel (GdrAutograd in
// gdr_op_common.h) whose backward runs the project's CPU backward kernel, so torch.autograd and
// deltacheck's gdr_grad cases can differentiate it. Check it with (one line each)
//   deltacheck run --suite gate --backend torch-op
//       --library build/examples/torch_op/libdeltacheck_example_op.so
//       --op deltacheck_example::chunk_gated_delta_rule
//   deltacheck run --suite gate --filter '^gdr_grad' --backend torch-op
//       --library build/examples/torch_op/libdeltacheck_example_op.so
//       --op deltacheck_example::chunk_gated_delta_rule
#include <torch/library.h>

#include "examples/torch_op/gdr_op_common.h"

namespace deltacheck_example {
namespace {

struct ChunkGatedDeltaRule {
  static constexpr const char* kName = "deltacheck_example::chunk_gated_delta_rule";
  static void backward(const GdrBackwardCall& b) { chunked_backward_kernel(b); }
};

}  // namespace

TORCH_LIBRARY(deltacheck_example, m) { m.def(kGdrSchema); }

TORCH_LIBRARY_IMPL(deltacheck_example, CPU, m) {
  m.impl("chunk_gated_delta_rule", &chunked_kernel);
}

// Under the Autograd key (every device's autograd): what makes the operator differentiable.
TORCH_LIBRARY_IMPL(deltacheck_example, Autograd, m) {
  m.impl("chunk_gated_delta_rule", &GdrAutograd<ChunkGatedDeltaRule>::call);
}

}  // namespace deltacheck_example
