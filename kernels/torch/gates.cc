// Gate computation for the gated delta rule layer, in fp32 whatever the input dtype.
#include "kernels/torch/gates.h"

#include <ATen/ATen.h>

#include <optional>

#include "kernels/torch/varlen.h"

namespace deltacheck::kernels::torch {

TorchGates gdn_gates(const at::Tensor& a, const at::Tensor& b, const at::Tensor& A_log,
                     const at::Tensor& dt_bias) {
  constexpr const char* kWho = "gdn_gates";
  std::optional<at::NoGradGuard> no_grad;
  if (!records_gradients({a, b, A_log, dt_bias})) no_grad.emplace();
  if (!a.defined() || !b.defined() || a.dim() < 1 || a.sizes() != b.sizes()) {
    fail(kWho, "a and b must have the same shape [..., HV]");
  }
  const int64_t HV = a.size(-1);
  for (const at::Tensor* t : {&A_log, &dt_bias}) {
    if (!t->defined() || t->dim() != 1 || t->size(0) != HV) {
      fail(kWho, "A_log and dt_bias must be [" + std::to_string(HV) + "], got " + shape_string(*t));
    }
  }
  for (const at::Tensor* t : {&b, &A_log, &dt_bias}) {
    if (t->device() != a.device()) fail(kWho, "all tensors must be on a's device");
  }
  TorchGates r;
  r.g = -A_log.to(at::kFloat).exp() * at::softplus(a.to(at::kFloat) + dt_bias.to(at::kFloat));
  r.beta = at::sigmoid(b.to(at::kFloat)).to(b.scalar_type());
  return r;
}

}  // namespace deltacheck::kernels::torch
