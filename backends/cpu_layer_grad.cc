// The cpu backend's layer_grad cases: the CPU layer backward (kernels/cpu/
// linear_attention_layer_backward.h) on the case's tensors.
#include "backends/backends.h"
#include "kernels/cpu/linear_attention_layer_backward.h"
#include "ops/layer_grad/params.h"

namespace deltacheck::backends {
namespace {

kernels::cpu::LinearAttentionLayerBackwardParams layer_grad_params(const cases::Case& c,
                                                                   const cases::TensorMap& in,
                                                                   cases::TensorMap& out) {
  const ops::layer_grad::Params g = ops::layer_grad::decode(c);
  kernels::cpu::LinearAttentionLayerBackwardParams b;
  b.forward = layer_inputs(g.layer, in);
  b.d_output = in.at("do").data();
  if (const cases::Tensor* t = in.find("dht")) b.d_final_state = t->as<float>();
  if (const cases::Tensor* t = in.find("dconv")) b.d_final_conv_state = t->as<float>();
  b.dqkv = out.at("dqkv").data();
  b.dz = out.at("dz").data();
  b.da = out.at("da").data();
  b.db = out.at("db").data();
  b.dconv_weight = out.at("dconv_weight").as<float>();
  if (cases::Tensor* t = out.find("dconv_bias")) b.dconv_bias = t->as<float>();
  b.dA_log = out.at("dA_log").as<float>();
  b.ddt_bias = out.at("ddt_bias").as<float>();
  b.dnorm_weight = out.at("dnorm_weight").as<float>();
  if (cases::Tensor* t = out.find("dinitial_state")) b.dinitial_state = t->as<float>();
  if (cases::Tensor* t = out.find("dinitial_conv_state")) b.dinitial_conv_state = t->as<float>();
  return b;
}

}  // namespace

Status run_cpu_layer_grad_case(const cases::Case& c, const cases::TensorMap& in,
                               cases::TensorMap& out) {
  return kernels::cpu::linear_attention_layer_backward(layer_grad_params(c, in, out));
}

}  // namespace deltacheck::backends
