// The cpu backend's layer cases (kernels/cpu/linear_attention_layer; one-token decode calls take
// its decode step: causal_conv1d_update and recurrent_decode), and the deliberately wrong conv that
// reads across a packed boundary.
#include <algorithm>
#include <cstring>
#include <vector>

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

// cache=pool, accept, ckpt and spec (ops/layer/serving.h): in place on copies of the pools. A pool
// call whose sequences have one token each is a decode batch (causal_conv1d_update,
// recurrent_decode), as vLLM routes it; it must honour has_initial_state as the prefill does. A
// verify is a decode of 1 + k tokens per sequence with state_indices and num_accepted_tokens.
Status run_cpu_layer_serving(const cases::Case& c, const cases::TensorMap& in,
                             cases::TensorMap& out) {
  const ops::layer::Params d = ops::layer::decode(c);
  kernels::cpu::LinearAttentionLayerParams p = layer_inputs(d, in);
  p.out = out.at("o").data();
  cases::Tensor &pool = out.at("state_pool"), &conv = out.at("conv_state_pool");
  std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
  std::memcpy(conv.data(), in.at("conv_state_pool").data(), conv.nbytes());
  if (d.cache == ops::layer::Cache::kCkpt) {  // the prefill, its checkpoints into the pools
    const cases::Tensor& slots = in.at("block_slots");
    kernels::cpu::StateCheckpoints ck;
    ck.block_size = d.calls;
    ck.block_slots = slots.as<int32_t>();
    ck.max_blocks = slots.shape()[1];
    ck.pool = pool.as<float>();
    ck.num_rows = pool.shape()[0];
    p.checkpoints = &ck;
    p.conv_checkpoint_pool = conv.as<float>();
    return kernels::cpu::linear_attention_layer(p);
  }
  p.initial_state = p.final_state = pool.as<float>();
  p.initial_conv_state = p.final_conv_state = conv.as<float>();
  p.num_state_rows = pool.shape()[0];
  if (d.cache == ops::layer::Cache::kAccept) {
    p.decode = true;
    p.decode_tokens = d.layout.lengths[0];
    p.state_indices = in.at("state_indices").as<int32_t>();
    p.num_accepted_tokens = in.at("num_accepted_tokens").as<int32_t>();
    p.conv_state_columns = conv.shape()[2];
    if (!p.cu_seqlens) p.num_seqs = 1;
    return kernels::cpu::linear_attention_layer(p);
  }
  p.state_slots = in.at("state_slots").as<int32_t>();
  if (d.cache == ops::layer::Cache::kSpec) {  // a decode of T tokens, every token's states kept
    p.decode = true;
    p.decode_tokens = d.layout.lengths[0];
    p.token_states = out.at("token_states").as<float>();
    p.token_conv_states = out.at("token_conv_states").as<float>();
    return kernels::cpu::linear_attention_layer(p);
  }
  const cases::Tensor& has = in.at("has_initial_state");
  std::vector<uint8_t> flags(static_cast<size_t>(has.numel()));
  for (int64_t i = 0; i < has.numel(); ++i) flags[i] = has.as<int32_t>()[i] != 0;
  p.has_initial_state = flags.data();
  const auto& l = d.layout.lengths;
  p.decode = std::all_of(l.begin(), l.end(), [](int64_t n) { return n == 1; });
  return kernels::cpu::linear_attention_layer(p);
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
    if (c.op() == "layer" && !ops::layer::decode(c).serving()) return Support::Yes();
    return Support::No("layer cases outside the pools (cache=pool, accept) only");
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
  if (ops::layer::decode(c).serving()) return run_cpu_layer_serving(c, in, out);
  return kernels::cpu::linear_attention_layer(layer_params(c, in, out));
}

std::unique_ptr<Backend> make_wrong_conv_backend() { return std::make_unique<ConvReadsPrevious>(); }

}  // namespace deltacheck::backends
