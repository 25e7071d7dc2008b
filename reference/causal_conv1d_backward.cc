// FP64 backward of the depthwise causal conv1d: per sequence, recompute each pre-activation, take
// it through SiLU and hand its gradient back to the W inputs it read and to the weights.
#include "reference/causal_conv1d_backward.h"

#include <stdexcept>

#include "reference/gates.h"

namespace deltacheck::reference {

CausalConv1dGradients causal_conv1d_backward(const CausalConv1dArgs& a, const double* d_output,
                                             const double* d_final_state) {
  if (!d_output && a.batch * a.seq_len > 0)
    throw std::invalid_argument("causal_conv1d_backward: d_output (the gradient of y) is required");
  // The forward's checks on the live tokens (a padding tail past cu_seqlens[-1] is allowed).
  CausalConv1dArgs live = a;
  if (!a.cu_seqlens.empty()) {
    if (a.cu_seqlens.back() > a.seq_len || a.cu_seqlens.back() < 0)
      throw std::invalid_argument("causal_conv1d_backward: cu_seqlens[-1] must be in [0, T]");
    live.seq_len = a.cu_seqlens.back();
  }
  causal_conv1d(live);
  const int64_t D = a.channels, W = a.width, T = a.seq_len, C = W - 1;
  const bool packed = !a.cu_seqlens.empty();
  const int64_t n_seqs = packed ? static_cast<int64_t>(a.cu_seqlens.size()) - 1 : a.batch;
  CausalConv1dGradients r;
  r.dx.assign(static_cast<size_t>(a.batch * T * D), 0.0);
  r.dweight.assign(static_cast<size_t>(D * W), 0.0);
  r.dbias.assign(static_cast<size_t>(D), 0.0);
  r.dinitial_state.assign(static_cast<size_t>(n_seqs * D * C), 0.0);

  for (int64_t n = 0; n < n_seqs; ++n) {
    const int64_t first = packed ? a.cu_seqlens[n] : n * T;
    const int64_t len = packed ? a.cu_seqlens[n + 1] - a.cu_seqlens[n] : T;
    const bool has_state =
        a.initial_state && (a.has_initial_state.empty() || a.has_initial_state[n]);
    const double* state = has_state ? a.initial_state + n * D * C : nullptr;
    double* dstate = r.dinitial_state.data() + n * D * C;
    // Input i of the sequence (i < 0: the carried-in context) and where its gradient goes. The
    // context of a sequence without a state is zeros; its gradient is still the one w.r.t. those
    // zeros (as dh0 is for the rule).
    auto input = [&](int64_t i, int64_t d) -> double {
      if (i >= 0) return a.x[(first + i) * D + d];
      return state ? state[d * C + C + i] : 0.0;
    };
    auto grad = [&](int64_t i, int64_t d) -> double& {
      return i >= 0 ? r.dx[(first + i) * D + d] : dstate[d * C + C + i];
    };
    if (d_final_state)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = 0; j < C; ++j) grad(len - C + j, d) += d_final_state[(n * D + d) * C + j];
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        double acc = a.bias ? a.bias[d] : 0.0;
        for (int64_t j = 0; j < W; ++j) acc += a.weight[d * W + j] * input(t - C + j, d);
        double dacc = d_output[(first + t) * D + d];
        if (a.silu) {
          const double s = sigmoid(acc);
          dacc *= s * (1.0 + acc * (1.0 - s));  // d silu(x) / dx
        }
        r.dbias[d] += dacc;
        for (int64_t j = 0; j < W; ++j) {
          r.dweight[d * W + j] += dacc * input(t - C + j, d);
          grad(t - C + j, d) += dacc * a.weight[d * W + j];
        }
      }
    }
  }
  return r;
}

}  // namespace deltacheck::reference
