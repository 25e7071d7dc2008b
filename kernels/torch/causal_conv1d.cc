// Depthwise causal conv1d over packed sequences: one gather of W taps per token from a source that
// holds the packed tokens, every sequence's cached left context and a zero row, so the boundary
// handling lives entirely in host-built indices and the arithmetic is one batched expression.
#include "kernels/torch/causal_conv1d.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels/torch/varlen.h"

namespace deltacheck::kernels::torch {

TorchConvResult causal_conv1d(const at::Tensor& x, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias,
                              const std::optional<at::Tensor>& cu_seqlens,
                              const std::optional<at::Tensor>& initial_state, bool apply_silu) {
  constexpr const char* kWho = "causal_conv1d";
  std::optional<at::NoGradGuard> no_grad;
  if (!records_gradients({x, weight, value_or_undefined(bias), value_or_undefined(initial_state)}))
    no_grad.emplace();
  if (!x.defined() || x.dim() != 2) fail(kWho, "x must be [T, D]");
  if (!weight.defined() || weight.dim() != 2 || weight.size(0) != x.size(1) || weight.size(1) < 1) {
    fail(kWho, "weight has shape " + shape_string(weight) +
                   ", expected [D, W] with D=" + std::to_string(x.size(1)));
  }
  if (!at::isFloatingType(x.scalar_type()) || !at::isFloatingType(weight.scalar_type())) {
    fail(kWho, "x and weight must be floating-point tensors");
  }
  const int64_t T = x.size(0), D = x.size(1), W = weight.size(1), ctx = W - 1;
  const at::Device device = x.device();
  if (weight.device() != device) fail(kWho, "weight must be on x's device");
  at::Tensor b = value_or_undefined(bias);
  if (b.defined() && (b.dim() != 1 || b.size(0) != D || b.device() != device)) {
    fail(kWho, "bias has shape " + shape_string(b) + ", expected [" + std::to_string(D) +
                   "] on x's device");
  }
  const std::vector<int64_t> bounds = sequence_bounds(cu_seqlens, 1, T, kWho);
  const int64_t N = static_cast<int64_t>(bounds.size()) - 1;
  at::Tensor init = value_or_undefined(initial_state);
  if (init.defined()) {
    if (init.dim() != 3 || init.size(0) != N || init.size(1) != D || init.size(2) != ctx) {
      fail(kWho, "initial_state has shape " + shape_string(init) + ", expected [N, D, W - 1] = [" +
                     std::to_string(N) + ", " + std::to_string(D) + ", " + std::to_string(ctx) +
                     "]");
    }
    if (init.device() != device) fail(kWho, "initial_state must be on x's device");
  }

  // Source rows: [0, T) tokens, [T, T + N * ctx) cached contexts (sequence-major, oldest
  // first), then one zero row. A position p < 0 of sequence n (its left context) is context
  // entry ctx + p.
  const at::TensorOptions f32 = x.options().dtype(at::kFloat);
  const int64_t context_base = T, zero_row = T + (init.defined() ? N * ctx : 0);
  std::vector<at::Tensor> parts = {x.to(at::kFloat)};
  if (init.defined()) parts.push_back(init.to(at::kFloat).permute({0, 2, 1}).reshape({N * ctx, D}));
  parts.push_back(at::zeros({1, D}, f32));
  const at::Tensor source = at::cat(parts);
  auto row_of = [&](int64_t n, int64_t local) {
    if (local >= 0) return bounds[n] + local;
    return init.defined() ? context_base + n * ctx + ctx + local : zero_row;
  };

  std::vector<int64_t> taps(T * W), last(N * ctx);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t len = bounds[n + 1] - bounds[n];
    for (int64_t l = 0; l < len; ++l) {
      for (int64_t w = 0; w < W; ++w) taps[(bounds[n] + l) * W + w] = row_of(n, l - ctx + w);
    }
    for (int64_t c = 0; c < ctx; ++c) last[n * ctx + c] = row_of(n, len - ctx + c);
  }
  auto to_index = [&](const std::vector<int64_t>& values) {
    at::Tensor host = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
    std::copy(values.begin(), values.end(), host.data_ptr<int64_t>());
    return host.to(device);
  };

  TorchConvResult r;
  const at::Tensor windows = source.index_select(0, to_index(taps)).view({T, W, D});
  at::Tensor y = (windows * weight.to(at::kFloat).t().unsqueeze(0)).sum(1);
  if (b.defined()) y = y + b.to(at::kFloat);
  if (apply_silu) y = at::silu(y);
  r.output = y.to(x.scalar_type());
  r.final_state = source.index_select(0, to_index(last))
                      .view({N, ctx, D})
                      .permute({0, 2, 1})
                      .contiguous()
                      .to(init.defined() ? init.scalar_type() : x.scalar_type());
  return r;
}

TorchConvResult causal_conv1d_update(const at::Tensor& x, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias,
                                     const std::optional<at::Tensor>& conv_state, bool apply_silu) {
  constexpr const char* kWho = "causal_conv1d_update";
  std::optional<at::NoGradGuard> no_grad;
  if (!records_gradients({x, weight, value_or_undefined(bias), value_or_undefined(conv_state)}))
    no_grad.emplace();
  if (!x.defined() || x.dim() != 2 || !at::isFloatingType(x.scalar_type()))
    fail(kWho, "x must be a floating-point [N, D] tensor");
  const int64_t N = x.size(0), D = x.size(1);
  if (!weight.defined() || weight.dim() != 2 || weight.size(0) != D || weight.size(1) < 1 ||
      weight.device() != x.device()) {
    fail(kWho, "weight has shape " + shape_string(weight) +
                   ", expected [D, W] with D=" + std::to_string(D) + " on x's device");
  }
  const int64_t ctx = weight.size(1) - 1;
  const at::Tensor b = value_or_undefined(bias);
  if (b.defined() && (b.dim() != 1 || b.size(0) != D || b.device() != x.device()))
    fail(kWho, "bias has shape " + shape_string(b) + ", expected [" + std::to_string(D) + "]");
  const at::Tensor state = value_or_undefined(conv_state);
  if (state.defined() && (state.dim() != 3 || state.size(0) != N || state.size(1) != D ||
                          state.size(2) != ctx || state.device() != x.device())) {
    fail(kWho, "conv_state has shape " + shape_string(state) + ", expected [N, D, W - 1] = [" +
                   std::to_string(N) + ", " + std::to_string(D) + ", " + std::to_string(ctx) +
                   "] on x's device");
  }
  const at::Tensor past = state.defined() ? state.to(at::kFloat)
                                          : at::zeros({N, D, ctx}, x.options().dtype(at::kFloat));
  const at::Tensor window = at::cat({past, x.to(at::kFloat).unsqueeze(-1)}, -1);  // [N, D, W]
  at::Tensor y = (window * weight.to(at::kFloat).unsqueeze(0)).sum(-1);
  if (b.defined()) y = y + b.to(at::kFloat);
  if (apply_silu) y = at::silu(y);
  TorchConvResult r;
  r.output = y.to(x.scalar_type());
  r.final_state = window.narrow(-1, 1, ctx)
                      .contiguous()
                      .to(state.defined() ? state.scalar_type() : x.scalar_type());
  return r;
}

}  // namespace deltacheck::kernels::torch
