// A deliberately wrong backward: deltacheck_example_leaky_grad::chunk_gated_delta_rule has the
// right forward (the chunked CPU kernel, as deltacheck_example's) and a registered backward that
// carries the state gradient across a sequence boundary: it runs the sequences last first, and
// sequence i ends with the gradient dh0 of sequence i + 1 added to its own dht, the bug class of
// issue #21 (the backward of a kernel that ignores cu_seqlens only for the state gradient). The
// same bug as deltacheck's wrong:grad-carry-state, as a user's operator: the tests assert that
// gdr_grad cases flag it leak on multi-sequence cases and pass it where there is one sequence
// (and that its gdr cases pass: the forward is right).
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "examples/torch_op/gdr_op_common.h"

namespace deltacheck_example {
namespace {

// The right per-sequence backward, except for the state gradient a sequence ends with.
void carry_state_gradient_backward(const GdrBackwardCall& b) {
  const deltacheck::kernels::GatedDeltaRuleBackwardParams& p = b.params;
  const deltacheck::kernels::GatedDeltaRuleParams& f = p.forward;
  const int64_t n = num_sequences(f);
  const int64_t H = f.num_heads, HV = f.num_value_heads, K = f.key_dim, V = f.value_dim;
  const int64_t es = deltacheck::dtype_size(f.dtype), per_state = HV * K * V;
  std::vector<float> end(static_cast<size_t>(per_state));
  for (int64_t i = n - 1; i >= 0; --i) {
    const float* own = at_row(p.d_final_state, i, per_state);
    const float* next = i + 1 < n ? at_row(p.dh0, i + 1, per_state) : nullptr;  // the bug
    for (int64_t e = 0; e < per_state; ++e)
      end[e] = (own ? own[e] : 0.0f) + (next ? next[e] : 0.0f);
    const int64_t begin = sequence_tokens(f, i).begin;
    deltacheck::kernels::GatedDeltaRuleBackwardParams s = p;
    s.forward = sequence_params(f, i);
    s.d_output = at_token(p.d_output, begin, HV * V, es);
    s.d_final_state = end.data();
    s.dq = at_token(p.dq, begin, H * K, es);
    s.dk = at_token(p.dk, begin, H * K, es);
    s.dv = at_token(p.dv, begin, HV * V, es);
    s.dg = at_row(p.dg, begin, HV);
    s.dbeta = at_token(p.dbeta, begin, HV, es);
    s.dh0 = at_row(p.dh0, i, per_state);
    if (s.forward.seq_len == 0) {  // nothing to undo: dh0 is the gradient it ends with
      std::copy(end.begin(), end.end(), s.dh0);
      continue;
    }
    check_kernel_status(deltacheck::kernels::cpu::gated_delta_rule_backward(s),
                        "gated_delta_rule_backward");
  }
}

struct LeakyGradChunkGatedDeltaRule {
  static constexpr const char* kName = "deltacheck_example_leaky_grad::chunk_gated_delta_rule";
  static void backward(const GdrBackwardCall& b) { carry_state_gradient_backward(b); }
};

}  // namespace

TORCH_LIBRARY(deltacheck_example_leaky_grad, m) { m.def(kGdrSchema); }

TORCH_LIBRARY_IMPL(deltacheck_example_leaky_grad, CPU, m) {
  m.impl("chunk_gated_delta_rule", &chunked_kernel);
}

TORCH_LIBRARY_IMPL(deltacheck_example_leaky_grad, Autograd, m) {
  m.impl("chunk_gated_delta_rule", &GdrAutograd<LeakyGradChunkGatedDeltaRule>::call);
}

}  // namespace deltacheck_example
