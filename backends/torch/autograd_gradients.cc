// Gradient cases through LibTorch autograd (autograd_gradients.h).
#include "backends/torch/autograd_gradients.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "backends/torch/aten_tensors.h"
#include "ops/gdr_grad/params.h"

namespace deltacheck::backends::torch_bridge {

at::Tensor leaf(const cases::TensorMap& in, const char* name, const c10::Device& device) {
  return to_aten(in.at(name), device).clone().requires_grad_();
}

Status write_gradients(const std::vector<Recorded>& recorded, const std::vector<Leaf>& leaves,
                       cases::TensorMap& out) {
  std::vector<at::Tensor> outputs, grad_outputs, inputs;
  for (const Recorded& r : recorded)
    if (r.output.requires_grad()) outputs.push_back(r.output), grad_outputs.push_back(r.upstream);
  for (const Leaf& l : leaves) inputs.push_back(l.value);
  std::vector<at::Tensor> grads(inputs.size());
  if (!outputs.empty())
    grads = ::torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor gi = grads[i].defined() ? grads[i] : at::zeros_like(inputs[i]);
    if (Status st = copy_output(gi, out.at(leaves[i].gradient), leaves[i].gradient); !st.ok())
      return st;
  }
  return Status::Ok();
}

Status gdr_grad_through_autograd(const cases::Case& c, const cases::TensorMap& in,
                                 cases::TensorMap& out, const c10::Device& device,
                                 const GdrForward& forward) {
  const ops::gdr_grad::Params p = ops::gdr_grad::decode(c);
  std::vector<Leaf> leaves{{"dq", leaf(in, "q", device)},
                           {"dk", leaf(in, "k", device)},
                           {"dv", leaf(in, "v", device)},
                           {"dg", leaf(in, "g", device)},
                           {"dbeta", leaf(in, "beta", device)}};
  GdrForwardInputs x;
  if (in.find("initial_state"))
    leaves.push_back({"dh0", *(x.initial_state = leaf(in, "initial_state", device))});
  const int64_t tokens = p.rule.layout.has_cu_seqlens() ? p.tokens() : p.rule.T;
  auto sequences = [&](const at::Tensor& t) { return t.narrow(1, 0, tokens); };
  x.q = sequences(leaves[0].value);
  x.k = sequences(leaves[1].value);
  x.v = sequences(leaves[2].value);
  x.g = sequences(leaves[3].value);
  x.beta = sequences(leaves[4].value);
  x.cu_seqlens = optional_input(in, "cu_seqlens", device);
  x.key_dim = p.rule.K;
  x.l2 = p.rule.l2;
  x.final_state = p.dht;
  GdrForwardOutputs r;
  if (Status st = forward(x, r); !st.ok()) return st;
  std::vector<Recorded> recorded{{r.o, sequences(to_aten(in.at("do"), device))}};
  if (p.dht) recorded.push_back({r.final_state, to_aten(in.at("dht"), device)});
  return write_gradients(recorded, leaves, out);
}

}  // namespace deltacheck::backends::torch_bridge
