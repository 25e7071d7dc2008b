// The cpu backend's layer cases (kernels/cpu/linear_attention_layer; one-token decode calls take
// its decode step: causal_conv1d_update and recurrent_decode), and the deliberately wrong conv that
// reads across a packed boundary.
#include <cstring>

#include "backends/backends.h"
#include "kernels/cpu/linear_attention_layer.h"
#include "ops/layer/params.h"

namespace deltacheck::backends {

kernels::cpu::LinearAttentionLayerParams layer_inputs(const ops::layer::Params& d,
                                                      const cases::TensorMap& in) {
  kernels::cpu::LinearAttentionLayerParams p;
  const cases::Tensor& qkv = in.at("qkv");
  p.seq_len = qkv.shape()[1];
  p.num_heads = d.H;
  p.num_value_heads = d.HV;
  p.key_dim = d.K;
  p.value_dim = d.V;
  p.conv_width = d.W;
  p.dtype = cases::kernel_dtype(qkv.dtype());
  p.qkv = qkv.data();
  p.z = in.at("z").data();
  p.a = in.at("a").data();
  p.b = in.at("b").data();
  p.conv_weight = in.at("conv_weight").as<float>();
  if (const cases::Tensor* b = in.find("conv_bias")) p.conv_bias = b->as<float>();
  p.A_log = in.at("A_log").as<float>();
  p.dt_bias = in.at("dt_bias").as<float>();
  p.norm_weight = in.at("norm_weight").as<float>();
  if (const cases::Tensor* cu = in.find("cu_seqlens")) {
    p.cu_seqlens = cu->as<int64_t>();
    p.num_seqs = cu->numel() - 1;
  }
  if (const cases::Tensor* s = in.find("initial_state")) p.initial_state = s->as<float>();
  if (const cases::Tensor* s = in.find("initial_conv_state")) p.initial_conv_state = s->as<float>();
  return p;
}

namespace {

kernels::cpu::LinearAttentionLayerParams layer_params(const cases::Case& c,
                                                      const cases::TensorMap& in,
                                                      cases::TensorMap& out) {
  const ops::layer::Params d = ops::layer::decode(c);
  kernels::cpu::LinearAttentionLayerParams p = layer_inputs(d, in);
  p.out = out.at("o").data();
  if (cases::Tensor* s = out.find("final_state")) p.final_state = s->as<float>();
  if (cases::Tensor* s = out.find("final_conv_state")) p.final_conv_state = s->as<float>();
  // One-token decode calls (cache=decode, and the decode steps the harness drives for dynamic)
  // step through causal_conv1d_update and recurrent_decode, as a serving runtime does.
  p.decode = d.cache == ops::layer::Cache::kDecode;
  return p;
}

class ConvReadsPrevious : public Backend {
 public:
  std::string name() const override { return "wrong:conv-reads-previous"; }
  std::string description() const override {
    return "deliberately wrong: the short conv takes its left context from the previous "
           "sequence's last tokens";
  }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "layer") return Support::Yes();
    return Support::No("layer cases only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const cases::Tensor* cu = in.find("cu_seqlens");
    if (!cu) return run_cpu_layer_case(c, in, out);
    // Give each sequence after the first the conv state its packed predecessor rows imply.
    const cases::Tensor& qkv = in.at("qkv");
    const int64_t n = cu->numel() - 1, D = qkv.shape()[2], W = ops::layer::decode(c).W;
    cases::TensorMap leaky = in;
    cases::Tensor state("initial_conv_state", cases::DType::kF32, {n, D, W - 1});
    if (const cases::Tensor* own = in.find("initial_conv_state"))
      std::memcpy(state.data(), own->data(), own->nbytes());
    const int64_t* offs = cu->as<int64_t>();
    for (int64_t s = 1; s < n; ++s)
      for (int64_t j = 0; j < W - 1; ++j) {
        const int64_t row = offs[s] - (W - 1) + j;  // the W-1 rows before the sequence
        if (row < 0) continue;
        for (int64_t ch = 0; ch < D; ++ch)
          state.set((s * D + ch) * (W - 1) + j, qkv.get(row * D + ch));
      }
    if (cases::Tensor* t = leaky.find("initial_conv_state"))
      *t = std::move(state);
    else
      leaky.add(std::move(state));
    kernels::cpu::LinearAttentionLayerParams p = layer_params(c, leaky, out);
    return kernels::cpu::linear_attention_layer(p);
  }
};

}  // namespace

Status run_cpu_layer_case(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  return kernels::cpu::linear_attention_layer(layer_params(c, in, out));
}

std::unique_ptr<Backend> make_wrong_conv_backend() { return std::make_unique<ConvReadsPrevious>(); }

}  // namespace deltacheck::backends
