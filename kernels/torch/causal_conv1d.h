// Depthwise causal convolution with SiLU over packed sequences, in ATen tensor ops
// (docs/semantics.md, "Around the rule"): the short convolution in front of the gated delta rule.
// Each sequence sees only its own tokens and its own left context (zeros or its cached conv state),
// never a neighbour's tokens across a packed boundary.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace deltacheck::kernels::torch {

struct TorchConvResult {
  at::Tensor output;       // [T, D], dtype of x
  at::Tensor final_state;  // [N, D, W - 1]: each sequence's last W - 1 inputs, oldest first
                           // (reaching into its initial state when it is shorter than W - 1), in
                           // the initial state's dtype when given (so nothing is rounded), else x's
};

// x: [T, D] packed tokens; weight: [D, W]; bias: [D] or absent. cu_seqlens: int32/int64 [N + 1]
// (absent: one sequence). initial_state: [N, D, W - 1], oldest input first; absent: zero left
// context for every sequence. y[t, d] = silu(bias[d] + sum_w weight[d, w] * x[t - (W - 1) + w, d])
// computed in fp32, where positions before a sequence's start read its left context.
// Throws std::invalid_argument with a one-line message on inconsistent shapes.
TorchConvResult causal_conv1d(const at::Tensor& x, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias = std::nullopt,
                              const std::optional<at::Tensor>& cu_seqlens = std::nullopt,
                              const std::optional<at::Tensor>& initial_state = std::nullopt,
                              bool apply_silu = true);

// One decode step: x: [N, D], one new token per sequence; conv_state: [N, D, W - 1], each
// sequence's last W - 1 inputs, oldest first (absent: zeros). y[n, d] = silu(bias[d] +
// sum_{w < W-1} weight[d, w] * conv_state[n, d, w] + weight[d, W-1] * x[n, d]) in fp32; the new
// state is the old one shifted by one with x appended (in conv_state's dtype when given, else
// x's), as the conv-state update of a serving runtime (causal_conv1d_update).
// Throws std::invalid_argument with a one-line message on inconsistent shapes.
TorchConvResult causal_conv1d_update(const at::Tensor& x, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias = std::nullopt,
                                     const std::optional<at::Tensor>& conv_state = std::nullopt,
                                     bool apply_silu = true);

}  // namespace deltacheck::kernels::torch
