// A deliberately wrong example operator: deltacheck_example_leaky::chunk_gated_delta_rule
// ignores cu_seqlens the way the leaking plain-PyTorch fallbacks did, so the recurrent state of
// each packed sequence flows into the next one. It exists so that the tests (and a user trying
// the torch-op backend) can see deltacheck flag it: verdict leak on packed cases with two or
// more sequences, pass on everything else.
#include <torch/library.h>

#include <cstring>
#include <vector>

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
  const int64_t per_state = p.num_value_heads * p.key_dim * p.value_dim;
  const int64_t es = c.q.element_size();
  std::vector<float> carried(static_cast<size_t>(per_state), 0.0f);
  float* final_state = c.final_state.data_ptr<float>();
  for (int64_t i = 0; i < p.num_seqs; ++i) {
    const int64_t begin = p.cu_seqlens[i], len = p.cu_seqlens[i + 1] - begin;
    deltacheck::kernels::GatedDeltaRuleParams s = p;
    s.batch = 1;
    s.seq_len = len;
    s.cu_seqlens = nullptr;
    s.num_seqs = 0;
    auto at_token = [&](const void* base, int64_t per_token) {
      return static_cast<const char*>(base) + begin * per_token * es;
    };
    s.q = at_token(p.q, p.num_heads * p.key_dim);
    s.k = at_token(p.k, p.num_heads * p.key_dim);
    s.v = at_token(p.v, p.num_value_heads * p.value_dim);
    s.beta = at_token(p.beta, p.num_value_heads);
    s.g = p.g + begin * p.num_value_heads;
    s.o = static_cast<char*>(p.o) + begin * p.num_value_heads * p.value_dim * es;
    s.initial_state = i == 0 ? p.initial_state : carried.data();
    s.final_state = final_state + i * per_state;
    check_kernel_status(deltacheck::kernels::cpu::chunked_gated_delta_rule(s));
    std::memcpy(carried.data(), s.final_state, per_state * sizeof(float));
  }
  return {c.o, c.final_state};
}

}  // namespace

TORCH_LIBRARY(deltacheck_example_leaky, m) { m.def(kGdrSchema); }

TORCH_LIBRARY_IMPL(deltacheck_example_leaky, CPU, m) {
  m.impl("chunk_gated_delta_rule", &leaky_chunk_gated_delta_rule);
}

}  // namespace deltacheck_example
