// The output norm of the linear-attention layer in ATen tensor ops (docs/semantics.md, "Around the
// rule"): per value head, in fp32, y = w * x / sqrt(mean(x^2) + eps) * silu(z).
#pragma once

#include <ATen/core/Tensor.h>

namespace deltacheck::kernels::torch {

// x, z: [..., V] (normalized over the last dimension, one value head per row); weight: [V].
// Returns [..., V] in x's dtype. Throws std::invalid_argument on inconsistent shapes.
at::Tensor gated_rms_norm(const at::Tensor& x, const at::Tensor& z, const at::Tensor& weight,
                          double eps = 1e-6);

}  // namespace deltacheck::kernels::torch
