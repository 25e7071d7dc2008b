// Backend "torch": the ATen kernels of kernels/torch, on the device given by --device. Each case
// op the backend knows is one entry of kTorchOps (a supports and a run function); adding an op is
// one entry and its run function.
#include "backends/torch/torch_backend.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/torch/aten_tensors.h"
#include "backends/torch/autograd_gradients.h"
#include "backends/torch/torch_mask_adapter.h"
#include "kernels/torch/gated_delta_rule.h"
#include "kernels/torch/linear_attention_layer.h"
#include "ops/gdr/problem.h"
#include "ops/gdr/serving.h"
#include "ops/layer/params.h"
#include "ops/layer_grad/params.h"

namespace deltacheck::backends {
namespace {

using cases::Case;
using cases::TensorMap;
using torch_bridge::copy_output;
using torch_bridge::Leaf;
using torch_bridge::leaf;
using torch_bridge::optional_input;
using torch_bridge::Recorded;
using torch_bridge::to_aten;
using torch_bridge::write_gradients;

struct TorchOp {
  const char* op;  // case op, e.g. "gdr"
  Support (*supports)(const Case& c);
  Status (*run)(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device);
};

// ---- gdr: the chunked gated delta rule --------------------------------------------------------

// chunked and dynamic are driven by the harness (harness/call_plan.h) as prefill and decode calls
// with the state carried between them; pool and spec read and write a slot-addressed state pool,
// gathered and scattered here around the kernels, as a framework without pooled kernels does.
Support gdr_supports(const Case&) { return Support::Yes(); }  // every cache mode

struct GdrTensors {
  at::Tensor q, k, v, g, beta;
  std::optional<at::Tensor> cu_seqlens, initial_state;
  bool l2;
};

GdrTensors gdr_tensors(const Case& c, const TensorMap& in, const c10::Device& device) {
  return {to_aten(in.at("q"), device),
          to_aten(in.at("k"), device),
          to_aten(in.at("v"), device),
          to_aten(in.at("g"), device),
          to_aten(in.at("beta"), device),
          optional_input(in, "cu_seqlens", device),
          optional_input(in, "initial_state", device),
          ops::gdr::decode(c).l2};
}

// Prefill through the chunked form, decode calls (one token per sequence) through the recurrence.
kernels::torch::TorchGdrResult gdr_call(const GdrTensors& t, bool decode, bool keep_state) {
  if (decode)
    return kernels::torch::recurrent_gated_delta_rule(
        t.q, t.k, t.v, t.g, t.beta, t.cu_seqlens, t.initial_state, /*scale=*/0.0, t.l2, keep_state);
  return kernels::torch::chunked_gated_delta_rule(t.q, t.k, t.v, t.g, t.beta, t.cu_seqlens,
                                                  t.initial_state, /*scale=*/0.0, t.l2,
                                                  /*chunk_size=*/64, keep_state);
}

// cache=pool with one token per sequence: a serving decode batch, through the pooled recurrent
// decode (in place on a copy of the pool, padding entries skipped).
Status gdr_run_pooled_decode(const Case& c, const TensorMap& in, TensorMap& out,
                             const c10::Device& device) {
  const GdrTensors t = gdr_tensors(c, in, device);
  const int64_t n = t.q.size(0) * t.q.size(1);  // tokens = entries
  auto entries = [&](const at::Tensor& x) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.erase(shape.begin());
    shape[0] = n;
    shape.insert(shape.begin() + 1, 1);
    return x.reshape(shape);
  };
  at::Tensor pool = to_aten(in.at("state_pool"), device).clone();
  const at::Tensor o = kernels::torch::recurrent_decode_pooled(
      entries(t.q), entries(t.k), entries(t.v), entries(t.g), entries(t.beta), pool,
      to_aten(in.at("state_slots"), device), /*scale=*/0.0, t.l2);
  if (Status st = copy_output(o.reshape(t.v.sizes()), out.at("o"), "o"); !st.ok()) return st;
  return copy_output(pool, out.at("state_pool"), "state_pool");
}

// cache=pool: every entry starts from its pool row; entries with a negative slot (padding) are
// computed from row 0 but never written back, so rows nobody addresses stay as they were.
// cache=spec: the draft tokens one recurrent step at a time, keeping the state after each.
Status gdr_run_pooled(const Case& c, const TensorMap& in, TensorMap& out,
                      const c10::Device& device) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.cache == ops::gdr::Cache::kPool && ops::gdr::one_token_per_sequence(d))
    return gdr_run_pooled_decode(c, in, out, device);
  GdrTensors t = gdr_tensors(c, in, device);
  const at::Tensor pool = to_aten(in.at("state_pool"), device);
  const at::Tensor slots = to_aten(in.at("state_slots"), device).to(at::kLong);
  const at::Tensor used = slots.ge(0).nonzero().squeeze(1);
  t.initial_state = pool.index_select(0, slots.clamp_min(0));
  at::Tensor o, last_state;
  if (d.cache == ops::gdr::Cache::kSpec) {
    const int64_t drafts = t.q.size(1);
    std::vector<at::Tensor> outputs, states;
    const GdrTensors all = t;
    for (int64_t i = 0; i < drafts; ++i) {
      auto token = [&](const at::Tensor& x) { return x.narrow(1, i, 1); };
      t.q = token(all.q), t.k = token(all.k), t.v = token(all.v), t.g = token(all.g),
      t.beta = token(all.beta);
      const auto r = gdr_call(t, /*decode=*/true, /*keep_state=*/true);
      outputs.push_back(r.output);
      states.push_back(r.final_state);
      t.initial_state = r.final_state;
    }
    o = at::cat(outputs, 1);
    last_state = *t.initial_state;
    if (Status st = copy_output(at::stack(states, 1), out.at("token_states"), "token_states");
        !st.ok())
      return st;
  } else {
    const auto r = gdr_call(t, /*decode=*/false, /*keep_state=*/true);
    o = r.output;
    last_state = r.final_state;
  }
  at::Tensor pool_after = pool.clone();
  pool_after.index_copy_(0, slots.index_select(0, used), last_state.index_select(0, used));
  if (Status st = copy_output(o, out.at("o"), "o"); !st.ok()) return st;
  return copy_output(pool_after, out.at("state_pool"), "state_pool");
}

// An int64 index tensor on the device.
at::Tensor long_tensor(const std::vector<int64_t>& v, const c10::Device& device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

// cache=accept (docs/serving.md): each sequence starts from row state_indices[n,
// num_accepted_tokens[n] - 1], gathered; the tokens one recurrent step at a time, the state after
// token t scattered into row state_indices[n, t].
Status gdr_run_accept(const Case& c, const TensorMap& in, TensorMap& out,
                      const c10::Device& device) {
  GdrTensors t = gdr_tensors(c, in, device);
  at::Tensor pool = to_aten(in.at("state_pool"), device).clone();
  const at::Tensor idx = to_aten(in.at("state_indices"), device).to(at::kLong);        // [N, T]
  const at::Tensor acc = to_aten(in.at("num_accepted_tokens"), device).to(at::kLong);  // [N]
  t.initial_state = pool.index_select(0, idx.gather(1, (acc - 1).unsqueeze(1)).squeeze(1));
  const GdrTensors all = t;
  std::vector<at::Tensor> outputs;
  for (int64_t i = 0; i < all.q.size(1); ++i) {
    auto token = [&](const at::Tensor& x) { return x.narrow(1, i, 1); };
    t.q = token(all.q), t.k = token(all.k), t.v = token(all.v), t.g = token(all.g),
    t.beta = token(all.beta);
    const auto r = gdr_call(t, /*decode=*/true, /*keep_state=*/true);
    outputs.push_back(r.output);
    pool.index_copy_(0, idx.select(1, i), r.final_state);
    t.initial_state = r.final_state;
  }
  if (Status st = copy_output(at::cat(outputs, 1), out.at("o"), "o"); !st.ok()) return st;
  return copy_output(pool, out.at("state_pool"), "state_pool");
}

// cache=tree (docs/serving.md): token t of every request in one recurrent step from its parent's
// state, gathered from a bank [N, 1 + T, HV, K, V] (column 0 the start rows, column 1 + u token
// u's state); each token's state scattered into row state_indices[n, t].
Status gdr_run_tree(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
  GdrTensors t = gdr_tensors(c, in, device);
  at::Tensor pool = to_aten(in.at("state_pool"), device).clone();
  const at::Tensor idx = to_aten(in.at("state_indices"), device).to(at::kLong);  // [N, T]
  const at::Tensor parents = to_aten(in.at("parents"), device).to(at::kLong);    // [N, T]
  const at::Tensor start = to_aten(in.at("state_slots"), device).to(at::kLong);  // [N]
  const int64_t n = idx.size(0), tokens = idx.size(1);
  std::vector<int64_t> bank_shape{n, 1 + tokens};
  for (int64_t dim : pool.sizes().slice(1)) bank_shape.push_back(dim);
  at::Tensor bank = at::zeros(bank_shape, pool.options());
  bank.select(1, 0).copy_(pool.index_select(0, start));
  const at::Tensor requests = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device));
  const GdrTensors all = t;
  std::vector<at::Tensor> outputs;
  for (int64_t i = 0; i < tokens; ++i) {
    auto token = [&](const at::Tensor& x) { return x.narrow(1, i, 1); };
    t.q = token(all.q), t.k = token(all.k), t.v = token(all.v), t.g = token(all.g),
    t.beta = token(all.beta);
    t.initial_state =
        bank.flatten(0, 1).index_select(0, requests * (1 + tokens) + parents.select(1, i) + 1);
    const auto r = gdr_call(t, /*decode=*/true, /*keep_state=*/true);
    outputs.push_back(r.output);
    bank.select(1, i + 1).copy_(r.final_state);
    pool.index_copy_(0, idx.select(1, i), r.final_state);
  }
  if (Status st = copy_output(at::cat(outputs, 1), out.at("o"), "o"); !st.ok()) return st;
  return copy_output(pool, out.at("state_pool"), "state_pool");
}

// cache=ckpt: the chunked prefill block by block (block b of every sequence as one packed call,
// from the state its block b - 1 ended with), each block's end state scattered into its row.
Status gdr_run_ckpt(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  const GdrTensors all = gdr_tensors(c, in, device);
  auto flat = [&](const at::Tensor& x) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[1] *= shape[0];
    shape[0] = 1;
    return x.reshape(shape);
  };
  at::Tensor pool = to_aten(in.at("state_pool"), device).clone();
  at::Tensor states = all.initial_state ? all.initial_state->clone()
                                        : at::zeros({d.N, d.HV, d.K, d.V}, pool.options());
  at::Tensor o = at::zeros_like(flat(all.v));
  const cases::Tensor& slots = in.at("block_slots");
  const int64_t cols = slots.shape()[1], bs = ops::gdr::ckpt_block_size(d);
  const std::vector<int64_t> cu = d.layout.cu_seqlens();
  for (int64_t b = 0; b < cols; ++b) {
    std::vector<int64_t> pos, seqs, rows, piece_cu{0};
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t len = d.layout.lengths[s], begin = b * bs;
      if (begin >= len) continue;
      const int64_t first = d.layout.has_cu_seqlens() ? cu[s] : s * d.T;
      for (int64_t i = begin; i < std::min(len, begin + bs); ++i) pos.push_back(first + i);
      piece_cu.push_back(static_cast<int64_t>(pos.size()));
      seqs.push_back(s);
      rows.push_back(slots.as<int32_t>()[s * cols + b]);
    }
    if (seqs.empty()) continue;
    const at::Tensor p = long_tensor(pos, device), sq = long_tensor(seqs, device);
    GdrTensors t = all;
    t.q = flat(all.q).index_select(1, p), t.k = flat(all.k).index_select(1, p);
    t.v = flat(all.v).index_select(1, p), t.g = flat(all.g).index_select(1, p);
    t.beta = flat(all.beta).index_select(1, p);
    t.cu_seqlens = long_tensor(piece_cu, device);
    t.initial_state = states.index_select(0, sq);
    const auto r = gdr_call(t, /*decode=*/false, /*keep_state=*/true);
    o.index_copy_(1, p, r.output);
    states.index_copy_(0, sq, r.final_state);
    pool.index_copy_(0, long_tensor(rows, device), r.final_state);
  }
  if (Status st = copy_output(o.reshape(all.v.sizes()), out.at("o"), "o"); !st.ok()) return st;
  return copy_output(pool, out.at("state_pool"), "state_pool");
}

Status gdr_run(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.pooled()) return gdr_run_pooled(c, in, out, device);
  if (d.cache == ops::gdr::Cache::kCkpt) return gdr_run_ckpt(c, in, out, device);
  if (d.cache == ops::gdr::Cache::kAccept) return gdr_run_accept(c, in, out, device);
  if (d.cache == ops::gdr::Cache::kTree) return gdr_run_tree(c, in, out, device);
  cases::Tensor* final_state = out.find("final_state");
  const auto r = gdr_call(gdr_tensors(c, in, device), d.cache == ops::gdr::Cache::kDecode,
                          final_state != nullptr);
  if (Status st = copy_output(r.output, out.at("o"), "o"); !st.ok()) return st;
  if (final_state) return copy_output(r.final_state, *final_state, "final_state");
  return Status::Ok();
}

// ---- gdr_grad: LibTorch autograd of the chunked forward --------------------------------------

// The chunked forward recorded by autograd (its inputs require gradients); the leaves, the tail
// cut and the gradients' outputs are autograd_gradients.h's, shared with torch-op.
Status gdr_grad_run(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
  return torch_bridge::gdr_grad_through_autograd(
      c, in, out, device,
      [](const torch_bridge::GdrForwardInputs& x, torch_bridge::GdrForwardOutputs& r) {
        const auto f = kernels::torch::chunked_gated_delta_rule(
            x.q, x.k, x.v, x.g, x.beta, x.cu_seqlens, x.initial_state, /*scale=*/0.0, x.l2,
            /*chunk_size=*/64, /*output_final_state=*/x.final_state);
        r.o = f.output;
        r.final_state = f.final_state;
        return Status::Ok();
      });
}

// ---- mask, layers, segments: the LibTorch mask builder (torch_mask_adapter.h) ----------------

Support mask_supports(const Case& c) {
  if (torch_mask_supports(c)) return Support::Yes();
  return Support::No("the LibTorch mask builder does not run op '" + c.op() + "'");
}

// The builder takes and returns host buffers, so it runs on the CPU whatever the device.
Status mask_run(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device&) {
  return run_torch_mask_case(c, in, out);
}

// ---- layer: kernels::torch::linear_attention_layer ------------------------------------------

Support layer_supports(const Case& c) {
  if (c.op() == "layer" && ops::layer::decode(c).serving())
    return Support::No("the LibTorch layer has no state pools (cache=pool, accept)");
  return Support::Yes();
}

// The layer's weights from the case's tensors, each made by `tensor(name)` (a copy on the device,
// or an autograd leaf).
template <typename MakeTensor>
kernels::torch::LinearAttentionWeights layer_weights(const ops::layer::Params& d,
                                                     const TensorMap& in, MakeTensor tensor) {
  kernels::torch::LinearAttentionWeights w;
  w.num_heads = d.H;
  w.num_value_heads = d.HV;
  w.key_dim = d.K;
  w.value_dim = d.V;
  w.conv_weight = tensor("conv_weight");
  if (in.find("conv_bias")) w.conv_bias = tensor("conv_bias");
  w.A_log = tensor("A_log");
  w.dt_bias = tensor("dt_bias");
  w.norm_weight = tensor("norm_weight");
  return w;
}

// Tokens are [1, T, ...] in the case and [T, ...] for the kernel; decode calls (one token per
// sequence) take the decode step: causal_conv1d_update and the recurrence.
Status layer_run(const Case& c, const TensorMap& in, TensorMap& out, const c10::Device& device) {
  auto tensor = [&](const char* name) { return to_aten(in.at(name), device); };
  auto tokens = [&](const char* name) { return tensor(name).squeeze(0); };
  const ops::layer::Params d = ops::layer::decode(c);
  const auto form = d.cache == ops::layer::Cache::kDecode ? kernels::torch::GdrForm::kDecode
                                                          : kernels::torch::GdrForm::kChunked;
  const auto r = kernels::torch::linear_attention_layer(
      tokens("qkv"), tokens("z"), tokens("a"), tokens("b"), layer_weights(d, in, tensor),
      optional_input(in, "cu_seqlens", device), optional_input(in, "initial_state", device),
      optional_input(in, "initial_conv_state", device), form);
  if (Status st = copy_output(r.output.unsqueeze(0), out.at("o"), "o"); !st.ok()) return st;
  if (cases::Tensor* fs = out.find("final_state"))
    if (Status st = copy_output(r.final_state, *fs, "final_state"); !st.ok()) return st;
  if (cases::Tensor* fc = out.find("final_conv_state"))
    return copy_output(r.final_conv_state.to(at::kFloat), *fc, "final_conv_state");
  return Status::Ok();
}

// ---- layer_grad: LibTorch autograd of the layer's chunked prefill ------------------------------

// As gdr_grad: every input and weight a leaf, the layer forward recorded on the sequences' tokens
// (the padding tail cut off), torch::autograd::grad with do, dht and dconv.
Status layer_grad_run(const Case& c, const TensorMap& in, TensorMap& out,
                      const c10::Device& device) {
  const ops::layer_grad::Params p = ops::layer_grad::decode(c);
  // Every gradient output is named after its input: qkv -> dqkv, A_log -> dA_log, ...
  std::vector<Leaf> leaves;
  auto grad_leaf = [&](const char* name) {
    leaves.push_back({"d" + std::string(name), leaf(in, name, device)});
    return leaves.back().value;
  };
  const at::Tensor qkv = grad_leaf("qkv"), z = grad_leaf("z"), a = grad_leaf("a"),
                   b = grad_leaf("b");
  const kernels::torch::LinearAttentionWeights w = layer_weights(p.layer, in, grad_leaf);
  std::optional<at::Tensor> h0, conv_h0;
  if (in.find("initial_state")) h0 = grad_leaf("initial_state");
  if (in.find("initial_conv_state")) {
    conv_h0 = grad_leaf("initial_conv_state");
  } else if (p.dconv) {
    // A zero left context in fp32 (the same values as none) keeps the final conv state in fp32,
    // so dconv reaches it unrounded.
    const ops::layer::Params& d = p.layer;
    conv_h0 = at::zeros({d.N, d.D, d.W - 1}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
  const int64_t tokens = p.layer.layout.has_cu_seqlens() ? p.tokens() : p.layer.T;
  auto sequences = [&](const at::Tensor& x) { return x.squeeze(0).narrow(0, 0, tokens); };
  const auto r = kernels::torch::linear_attention_layer(
      sequences(qkv), sequences(z), sequences(a), sequences(b), w,
      optional_input(in, "cu_seqlens", device), h0, conv_h0, kernels::torch::GdrForm::kChunked);
  std::vector<Recorded> recorded{{r.output, sequences(to_aten(in.at("do"), device))}};
  if (p.dht) recorded.push_back({r.final_state, to_aten(in.at("dht"), device)});
  if (p.dconv) recorded.push_back({r.final_conv_state, to_aten(in.at("dconv"), device)});
  return write_gradients(recorded, leaves, out);
}

constexpr TorchOp kTorchOps[] = {
    {"gdr", gdr_supports, gdr_run},                  // kernels/torch/gated_delta_rule
    {"gdr_grad", gdr_supports, gdr_grad_run},        // autograd of kernels/torch/gated_delta_rule
    {"layer", layer_supports, layer_run},            // kernels/torch/linear_attention_layer
    {"layer_grad", layer_supports, layer_grad_run},  // autograd of the layer's chunked prefill
    {"mask", mask_supports, mask_run},               // kernels/torch/mask_builder
    {"layers", mask_supports, mask_run},             // per layer type
    {"segments", mask_supports, mask_run},           // sequence boundaries
};

const TorchOp* find_op(const std::string& op) {
  for (const TorchOp& t : kTorchOps)
    if (op == t.op) return &t;
  return nullptr;
}

class TorchBackend : public Backend {
 public:
  explicit TorchBackend(std::string device) : device_name_(std::move(device)) {}

  std::string name() const override { return "torch"; }
  std::string description() const override {
    std::string ops;
    for (const TorchOp& t : kTorchOps) ops += std::string(ops.empty() ? "" : ", ") + t.op;
    return "LibTorch " TORCH_VERSION " ATen kernels (kernels/torch) on --device cpu | cuda: " + ops;
  }

  Support supports(const Case& c) const override {
    const TorchOp* op = find_op(c.op());
    if (!op) return Support::No("torch backend has no kernel for op '" + c.op() + "'");
    const torch_bridge::DeviceChoice& d = device();
    if (!d.device) return Support::No(d.why_not);
    return op->supports(c);
  }

  // The ATen layer's result for a sequence changes in its last bits with what else is packed
  // with it (batched reductions), so its probes compare within tolerance.
  bool batch_invariant(const Case& c) const override {
    // autograd: not promised
    return c.op() != "layer" && c.op() != "gdr_grad" && c.op() != "layer_grad";
  }

  Status run(const Case& c, const TensorMap& in, TensorMap& out) override {
    const TorchOp* op = find_op(c.op());
    const torch_bridge::DeviceChoice& d = device();
    if (!op || !d.device) return Status::Unsupported(supports(c).reason);
    return torch_bridge::status_of("torch", [&] { return op->run(c, in, out, *d.device); });
  }

 private:
  // Resolved on first use: asking for the CUDA device count initializes CUDA, which listing the
  // backends must not do.
  const torch_bridge::DeviceChoice& device() const {
    std::call_once(device_once_, [&] { device_ = torch_bridge::choose_device(device_name_); });
    return device_;
  }

  std::string device_name_;
  mutable std::once_flag device_once_;
  mutable torch_bridge::DeviceChoice device_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_backend(const BackendOptions& options) {
  return std::make_unique<TorchBackend>(options.device);
}

void register_torch_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend_factory([](const BackendOptions& o) {
      std::vector<std::unique_ptr<Backend>> v;
      v.push_back(make_torch_backend(o));
      v.push_back(make_torch_op_backend(o));
      return v;
    });
  });
}

}  // namespace deltacheck::backends
