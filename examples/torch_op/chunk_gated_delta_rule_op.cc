// Example operator library for deltacheck's torch-op backend: registers
// deltacheck_example::chunk_gated_delta_rule, a CPU kernel for the calling convention that wraps
// the project's chunked CPU kernel. Check it with (one line)
//   deltacheck run --suite gate --backend torch-op
//       --library build/examples/torch_op/libdeltacheck_example_op.so
//       --op deltacheck_example::chunk_gated_delta_rule
#include <torch/library.h>

#include "examples/torch_op/gdr_op_common.h"

namespace deltacheck_example {
namespace {

std::tuple<at::Tensor, at::Tensor> chunk_gated_delta_rule(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    const at::Tensor& beta, const c10::optional<at::Tensor>& cu_seqlens,
    const c10::optional<at::Tensor>& initial_state, double scale, bool use_qk_l2norm) {
  GdrCall c = prepare_gdr_call(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
  if (!c.empty) check_kernel_status(deltacheck::kernels::cpu::chunked_gated_delta_rule(c.params));
  return {c.o, c.final_state};
}

}  // namespace

TORCH_LIBRARY(deltacheck_example, m) { m.def(kGdrSchema); }

TORCH_LIBRARY_IMPL(deltacheck_example, CPU, m) {
  m.impl("chunk_gated_delta_rule", &chunk_gated_delta_rule);
}

}  // namespace deltacheck_example
