// LibTorch autograd of the ATen chunked forward (kernels/torch/gated_delta_rule.h): with inputs
// that require gradients the forward is recorded (its state scan then builds new states instead
// of writing them in place), and torch::autograd::grad with do and dht gives the FP64 backward's
// gradients (reference/gated_delta_rule_backward.h) to fp32 rounding. Packed sequences of
// different lengths, so the scan's set of running sequences shrinks; GVA; an initial state.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

#include "kernels/torch/gated_delta_rule.h"
#include "reference/gated_delta_rule_backward.h"
#include "tests/kernels/torch/torch_test_util.h"

namespace deltacheck::kernels::torch {
namespace {

using test_util::compare;
using test_util::make_tensor;
using test_util::SplitMix64;
using test_util::to_doubles;

TEST(TorchGdrAutograd, GradientsOfTheChunkedForwardMatchTheFp64Backward) {
  const int64_t T = 150, H = 2, HV = 4, K = 16, V = 12;
  const std::vector<int64_t> cu{0, 70, 70, 75, 150};
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  SplitMix64 r(21);
  auto draw = [&](double lo, double hi) { return [&r, lo, hi] { return r.uniform(lo, hi); }; };
  at::Tensor q = make_tensor({1, T, H, K}, at::kFloat, draw(-1, 1));
  at::Tensor k = make_tensor({1, T, H, K}, at::kFloat, draw(-1, 1));
  at::Tensor v = make_tensor({1, T, HV, V}, at::kFloat, draw(-1, 1));
  at::Tensor g = make_tensor({1, T, HV}, at::kFloat, draw(-3, 0));
  at::Tensor beta = make_tensor({1, T, HV}, at::kFloat, draw(0.05, 1));
  at::Tensor h0 = make_tensor({N, HV, K, V}, at::kFloat, draw(-0.5, 0.5));
  const at::Tensor d_out = make_tensor({1, T, HV, V}, at::kFloat, draw(-1, 1));
  const at::Tensor d_ht = make_tensor({N, HV, K, V}, at::kFloat, draw(-1, 1));

  reference::GatedDeltaRuleArgs a;
  a.seq_len = T, a.num_heads = H, a.num_value_heads = HV, a.key_dim = K, a.value_dim = V;
  const std::vector<double> qd = to_doubles(q), kd = to_doubles(k), vd = to_doubles(v),
                            gd = to_doubles(g), bd = to_doubles(beta), hd = to_doubles(h0),
                            dod = to_doubles(d_out), dhd = to_doubles(d_ht);
  a.q = qd.data(), a.k = kd.data(), a.v = vd.data(), a.g = gd.data(), a.beta = bd.data();
  a.cu_seqlens = cu, a.initial_state = hd.data(), a.use_qk_l2norm = true;
  const reference::GatedDeltaRuleGradients ref =
      reference::gated_delta_rule_backward(a, dod.data(), dhd.data());

  const std::vector<at::Tensor> inputs{q.requires_grad_(),    k.requires_grad_(),
                                       v.requires_grad_(),    g.requires_grad_(),
                                       beta.requires_grad_(), h0.requires_grad_()};
  const at::Tensor cu_t = at::tensor(cu, at::kLong);
  const TorchGdrResult out = chunked_gated_delta_rule(q, k, v, g, beta, cu_t, h0, 0.0, true);
  const std::vector<at::Tensor> grads =
      ::torch::autograd::grad({out.output, out.final_state}, inputs, {d_out, d_ht});
  const std::vector<double>* want[] = {&ref.dq, &ref.dk, &ref.dv, &ref.dg, &ref.dbeta, &ref.dh0};
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
  for (int i = 0; i < 6; ++i) {
    const test_util::Comparison c = compare(grads[i], *want[i]);
    EXPECT_TRUE(c.finite) << names[i];
    EXPECT_GT(c.ref_norm, 0.0) << names[i];
    EXPECT_LT(c.rel_rms, 2e-5) << names[i];
  }
}

}  // namespace
}  // namespace deltacheck::kernels::torch
