// Gradient cases through LibTorch autograd, for the LibTorch backends: every input a leaf, the
// forward recorded, torch::autograd::grad with the case's upstream gradients, each gradient
// written to its output. The torch backend records its ATen forwards (gdr_grad, layer_grad), the
// torch-op backend the user's operator (gdr_grad, through its registered autograd kernel); both
// map the gradients to the outputs through these functions (docs/gradients.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::backends::torch_bridge {

// A copy of input `name` on the device that requires gradients: a leaf of the recorded forward.
at::Tensor leaf(const cases::TensorMap& in, const char* name, const c10::Device& device);

struct Recorded {
  at::Tensor output, upstream;  // a forward output and its upstream gradient (do, dht, ...)
};
struct Leaf {
  std::string gradient;  // output name, e.g. "dq"
  at::Tensor value;
};

// The gradients of the recorded forward outputs w.r.t. the leaves, each written to its output. An
// output autograd did not record (a pack of zero-length sequences records no o) contributes
// nothing; a leaf it never reached gets zeros.
Status write_gradients(const std::vector<Recorded>& recorded, const std::vector<Leaf>& leaves,
                       cases::TensorMap& out);

// ---- gdr_grad --------------------------------------------------------------------------------

// What a gdr_grad case's forward is called with: the leaves q, k, v, g, beta cut to the
// sequences' tokens (the padding tail after cu_seqlens[-1] is not passed: a forward needs
// cu_seqlens[-1] == T, and autograd hands the cut-off tokens zero gradients), cu_seqlens and the
// initial state (a leaf) when the case has them.
struct GdrForwardInputs {
  at::Tensor q, k, v, g, beta;
  std::optional<at::Tensor> cu_seqlens, initial_state;
  int64_t key_dim;   // K: the default scale is K^-0.5
  bool l2;           // use_qk_l2norm
  bool final_state;  // the case has dht: the final state must be returned and recorded
};
struct GdrForwardOutputs {
  at::Tensor o, final_state;  // final_state may stay undefined when the case has no dht
};
// Runs the forward under autograd; a Status that is not ok ends the case with it.
using GdrForward = std::function<Status(const GdrForwardInputs&, GdrForwardOutputs&)>;

// A gdr_grad case: the forward recorded by `forward`, the gradients of o (upstream do) and of the
// final state (dht, when the case has one) w.r.t. q, k, v, g, beta and the initial state written
// to dq, dk, dv, dg, dbeta and dh0.
Status gdr_grad_through_autograd(const cases::Case& c, const cases::TensorMap& in,
                                 cases::TensorMap& out, const c10::Device& device,
                                 const GdrForward& forward);

}  // namespace deltacheck::backends::torch_bridge
