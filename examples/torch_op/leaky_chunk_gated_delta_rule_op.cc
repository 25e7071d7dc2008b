// A deliberately wrong example operator: deltacheck_example_leaky::chunk_gated_delta_rule
// ignores cu_seqlens the way the leaking plain-PyTorch fallbacks did, so the recurrent state of
// each packed sequence flows into the next one. It exists so that the tests (and a user trying
// the torch-op backend) can see deltacheck flag it: verdict leak on packed cases with two or
// more sequences, pass on everything else. It registers no backward (no autograd kernel), so
// its gdr_grad cases are unsupported, with that reason.
#include <torch/library.h>

#include "examples/torch_op/gdr_op_common.h"

namespace deltacheck_example {
namespace {

std::tuple<at::Tensor, at::Tensor> leaky_chunk_gated_delta_rule(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    const at::Tensor& beta, const c10::optional<at::Tensor>& cu_seqlens,
    const c10::optional<at::Tensor>& initial_state, double scale, bool use_qk_l2norm) {
  GdrCall c = prepare_gdr_call(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
  const deltacheck::kernels::GatedDeltaRuleParams& p = c.params;
  if (c.empty) return {c.o, c.final_state};
  if (!p.cu_seqlens) {  // batch rows are separate anyway
    check_kernel_status(deltacheck::kernels::cpu::chunked_gated_delta_rule(p));
    return {c.o, c.final_state};
  }
  // The packed row as one stream: sequence i starts from the state sequence i - 1 ended with
  // (only the first gets its own initial state).
  for (int64_t i = 0; i < p.num_seqs; ++i) {
    deltacheck::kernels::GatedDeltaRuleParams s = sequence_params(p, i);
    if (i > 0) s.initial_state = s.final_state - p.num_value_heads * p.key_dim * p.value_dim;
    check_kernel_status(deltacheck::kernels::cpu::chunked_gated_delta_rule(s));
  }
  return {c.o, c.final_state};
}

}  // namespace

TORCH_LIBRARY(deltacheck_example_leaky, m) { m.def(kGdrSchema); }

TORCH_LIBRARY_IMPL(deltacheck_example_leaky, CPU, m) {
  m.impl("chunk_gated_delta_rule", &leaky_chunk_gated_delta_rule);
}

}  // namespace deltacheck_example
