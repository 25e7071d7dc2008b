// FP64 depthwise causal conv1d over packed or batched sequences, with conv states in and out.
#include "reference/causal_conv1d.h"

#include <stdexcept>
#include <string>

#include "reference/gates.h"

namespace deltacheck::reference {
namespace {

void validate(const CausalConv1dArgs& a) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("causal_conv1d: " + m); };
  if (a.batch < 1 || a.seq_len < 0) fail("batch must be >= 1 and seq_len >= 0");
  if (a.channels < 1 || a.width < 1) fail("channels and width must be >= 1");
  if (!a.x || !a.weight) fail("x and weight are required");
  if (!a.cu_seqlens.empty()) {
    if (a.batch != 1) fail("cu_seqlens requires batch == 1");
    if (a.cu_seqlens.size() < 2) fail("cu_seqlens needs at least 2 entries");
    if (a.cu_seqlens.front() != 0) fail("cu_seqlens must start at 0");
    if (a.cu_seqlens.back() != a.seq_len) fail("cu_seqlens must end at T");
    for (size_t i = 1; i < a.cu_seqlens.size(); ++i)
      if (a.cu_seqlens[i] < a.cu_seqlens[i - 1])
        fail("cu_seqlens is decreasing at index " + std::to_string(i));
  }
  const size_t n = a.cu_seqlens.empty() ? static_cast<size_t>(a.batch) : a.cu_seqlens.size() - 1;
  if (!a.has_initial_state.empty()) {
    if (a.has_initial_state.size() != n)
      fail("has_initial_state has " + std::to_string(a.has_initial_state.size()) + " entries for " +
           std::to_string(n) + " sequences");
    for (size_t i = 0; i < n; ++i)
      if (a.has_initial_state[i] && !a.initial_state)
        fail("sequence " + std::to_string(i) + " has an initial state but initial_state is null");
  }
}

}  // namespace

CausalConv1dResult causal_conv1d(const CausalConv1dArgs& a) {
  validate(a);
  const int64_t D = a.channels, W = a.width, T = a.seq_len;
  const bool packed = !a.cu_seqlens.empty();
  const int64_t n_seqs = packed ? static_cast<int64_t>(a.cu_seqlens.size()) - 1 : a.batch;
  CausalConv1dResult r;
  r.output.assign(static_cast<size_t>(a.batch * T * D), 0.0);
  r.final_state.assign(static_cast<size_t>(n_seqs * D * (W - 1)), 0.0);

  for (int64_t n = 0; n < n_seqs; ++n) {
    // Tokens of sequence n are rows [first, first + len) of the flattened [B * T, D] input.
    const int64_t first = packed ? a.cu_seqlens[n] : n * T;
    const int64_t len = packed ? a.cu_seqlens[n + 1] - a.cu_seqlens[n] : T;
    const bool has_state =
        a.initial_state && (a.has_initial_state.empty() || a.has_initial_state[n]);
    const double* state = has_state ? a.initial_state + n * D * (W - 1) : nullptr;
    // Input i of the sequence for channel d; i in [-(W-1), 0) is the carried-in context.
    auto input = [&](int64_t i, int64_t d) -> double {
      if (i >= 0) return a.x[(first + i) * D + d];
      return state ? state[d * (W - 1) + (W - 1) + i] : 0.0;
    };
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        double acc = a.bias ? a.bias[d] : 0.0;
        for (int64_t j = 0; j < W; ++j) acc += a.weight[d * W + j] * input(t - (W - 1) + j, d);
        r.output[(first + t) * D + d] = a.silu ? silu(acc) : acc;
      }
    }
    double* final_state = r.final_state.data() + n * D * (W - 1);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < W - 1; ++j)
        final_state[d * (W - 1) + j] = input(len - (W - 1) + j, d);
  }
  return r;
}

CausalConv1dResult causal_conv1d_update(const CausalConv1dUpdateArgs& u) {
  if (u.num_seqs < 0) throw std::invalid_argument("causal_conv1d_update: num_seqs must be >= 0");
  if (u.num_seqs == 0) return {};
  // A decode step is the convolution of N sequences of one token each, starting from their states.
  CausalConv1dArgs a;
  a.batch = u.num_seqs;
  a.seq_len = 1;
  a.channels = u.channels;
  a.width = u.width;
  a.x = u.x;
  a.weight = u.weight;
  a.bias = u.bias;
  a.silu = u.silu;
  a.initial_state = u.state;
  return causal_conv1d(a);
}

}  // namespace deltacheck::reference
