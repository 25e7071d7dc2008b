// Gated RMS norm, all arithmetic in fp32; only the result is rounded to x's dtype.
#include "kernels/torch/gated_rms_norm.h"

#include <ATen/ATen.h>

#include <optional>

#include "kernels/torch/varlen.h"

namespace deltacheck::kernels::torch {

at::Tensor gated_rms_norm(const at::Tensor& x, const at::Tensor& z, const at::Tensor& weight,
                          double eps) {
  constexpr const char* kWho = "gated_rms_norm";
  std::optional<at::NoGradGuard> no_grad;
  if (!records_gradients({x, z, weight})) no_grad.emplace();
  if (!x.defined() || !z.defined() || x.dim() < 1 || x.sizes() != z.sizes()) {
    fail(kWho, "x and z must have the same shape [..., V]");
  }
  if (!weight.defined() || weight.dim() != 1 || weight.size(0) != x.size(-1)) {
    fail(kWho, "weight must be [" + std::to_string(x.size(-1)) + "], got " + shape_string(weight));
  }
  if (z.device() != x.device() || weight.device() != x.device()) {
    fail(kWho, "all tensors must be on x's device");
  }
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor inv_rms = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true) + eps);
  return (weight.to(at::kFloat) * (xf * inv_rms) * at::silu(z.to(at::kFloat))).to(x.scalar_type());
}

}  // namespace deltacheck::kernels::torch
