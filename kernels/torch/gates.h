// The gates of the linear-attention layer in ATen tensor ops (docs/semantics.md, "Around the
// rule"): g = -exp(A_log) * softplus(a + dt_bias) in fp32, beta = sigmoid(b).
#pragma once

#include <ATen/core/Tensor.h>

namespace deltacheck::kernels::torch {

struct TorchGates {
  at::Tensor g;     // [..., HV] fp32 log-space decay (<= 0)
  at::Tensor beta;  // [..., HV] dtype of b, computed in fp32
};

// a, b: [..., HV]; A_log, dt_bias: [HV]. softplus is log(1 + exp(x)) (x itself above 20, as
// torch.nn.functional.softplus). Throws std::invalid_argument on inconsistent shapes.
TorchGates gdn_gates(const at::Tensor& a, const at::Tensor& b, const at::Tensor& A_log,
                     const at::Tensor& dt_bias);

}  // namespace deltacheck::kernels::torch
