// What the example operators share: checking the tensors of deltacheck's torch-op calling
// convention and pointing the project's CPU kernels at them (the forward,
// kernels/cpu/gated_delta_rule.h, and the backward, kernels/cpu/gated_delta_rule_backward.h), and
// the autograd kernel that makes an operator differentiable (GdrAutograd). A real operator library
// would do the same with its own kernels.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_delta_rule_backward.h"

namespace deltacheck_example {

// The schema deltacheck's torch-op backend expects (backends/torch/README.md).
inline constexpr const char* kGdrSchema =
    "chunk_gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, "
    "Tensor? cu_seqlens, Tensor? initial_state, float scale, bool use_qk_l2norm) "
    "-> (Tensor o, Tensor final_state)";

// Contiguous CPU copies of the inputs in the kernel's dtypes, the outputs, and kernel parameters
// pointing at all of them (one call of the chunked kernel computes the whole problem).
struct GdrCall {
  at::Tensor q, k, v, g, beta, cu_seqlens,
      initial_state;  // cu_seqlens / initial_state may be undefined
  at::Tensor o, final_state;
  deltacheck::kernels::GatedDeltaRuleParams params;
  // No tokens at all (an empty piece of a chunked prefill): nothing to compute, final_state
  // already holds the initial state. The kernel is not called: empty tensors have no data.
  bool empty = false;
};

inline deltacheck::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return deltacheck::DType::kF32;
    case at::kBFloat16:
      return deltacheck::DType::kBF16;
    case at::kHalf:
      return deltacheck::DType::kF16;
    default:
      break;
  }
  TORCH_CHECK(false, "q, k, v, beta must be float32, bfloat16 or float16, got ", t);
  return deltacheck::DType::kF32;  // not reached
}

inline GdrCall prepare_gdr_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& g, const at::Tensor& beta,
                                const c10::optional<at::Tensor>& cu_seqlens,
                                const c10::optional<at::Tensor>& initial_state, double scale,
                                bool use_qk_l2norm) {
  for (const at::Tensor* t : {&q, &k, &v, &g, &beta})
    TORCH_CHECK(t->device().is_cpu(), "this example operator runs on the CPU only");
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes(), "q, k must be [B, T, H, K]");
  TORCH_CHECK(v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1),
              "v must be [B, T, HV, V]");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  const int64_t HV = v.size(2), V = v.size(3);
  TORCH_CHECK(g.sizes() == at::IntArrayRef({B, T, HV}) && beta.sizes() == g.sizes(),
              "g, beta must be [B, T, HV]");
  const at::ScalarType dtype = q.scalar_type();
  TORCH_CHECK(k.scalar_type() == dtype && v.scalar_type() == dtype && beta.scalar_type() == dtype,
              "q, k, v, beta must share one dtype");

  GdrCall c;
  c.q = q.contiguous();
  c.k = k.contiguous();
  c.v = v.contiguous();
  c.g = g.to(at::kFloat).contiguous();
  c.beta = beta.contiguous();
  int64_t N = B;
  if (cu_seqlens.has_value() && cu_seqlens->defined()) {
    TORCH_CHECK(B == 1, "cu_seqlens needs B == 1");
    c.cu_seqlens = cu_seqlens->to(at::kCPU, at::kLong).contiguous();
    N = c.cu_seqlens.numel() - 1;
  }
  if (initial_state.has_value() && initial_state->defined()) {
    TORCH_CHECK(initial_state->sizes() == at::IntArrayRef({N, HV, K, V}),
                "initial_state must be [N, HV, K, V]");
    c.initial_state = initial_state->to(at::kCPU, at::kFloat).contiguous();
  }
  c.o = at::empty_like(c.v);
  c.final_state = at::zeros({N, HV, K, V}, at::kFloat);
  if (B * T == 0) {
    if (c.initial_state.defined()) c.final_state.copy_(c.initial_state);
    c.empty = true;
    return c;
  }

  deltacheck::kernels::GatedDeltaRuleParams& p = c.params;
  p.batch = B;
  p.seq_len = T;
  p.num_heads = H;
  p.num_value_heads = HV;
  p.key_dim = K;
  p.value_dim = V;
  p.dtype = kernel_dtype(dtype);
  p.q = c.q.data_ptr();
  p.k = c.k.data_ptr();
  p.v = c.v.data_ptr();
  p.g = c.g.data_ptr<float>();
  p.beta = c.beta.data_ptr();
  p.o = c.o.data_ptr();
  if (c.cu_seqlens.defined()) {
    p.cu_seqlens = c.cu_seqlens.data_ptr<int64_t>();
    p.num_seqs = N;
  }
  if (c.initial_state.defined()) p.initial_state = c.initial_state.data_ptr<float>();
  p.final_state = c.final_state.data_ptr<float>();
  p.scale = static_cast<float>(scale);
  p.use_qk_l2norm = use_qk_l2norm;
  return c;
}

inline void check_kernel_status(const deltacheck::Status& st,
                                const char* kernel = "chunked_gated_delta_rule") {
  TORCH_CHECK(st.ok(), kernel, ": ", st.message());
}

// The CPU kernel of the calling convention: the project's chunked kernel on the whole problem.
inline std::tuple<at::Tensor, at::Tensor> chunked_kernel(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
    const at::Tensor& beta, const c10::optional<at::Tensor>& cu_seqlens,
    const c10::optional<at::Tensor>& initial_state, double scale, bool use_qk_l2norm) {
  GdrCall c = prepare_gdr_call(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
  if (!c.empty) check_kernel_status(deltacheck::kernels::cpu::chunked_gated_delta_rule(c.params));
  return {c.o, c.final_state};
}

// ---- one sequence at a time (the deliberately wrong examples) ---------------------------------

inline int64_t num_sequences(const deltacheck::kernels::GatedDeltaRuleParams& p) {
  return p.cu_seqlens ? p.num_seqs : p.batch;
}

// Where sequence i's tokens are: the first (counted over B * T) and how many.
struct TokenSpan {
  int64_t begin, length;
};
inline TokenSpan sequence_tokens(const deltacheck::kernels::GatedDeltaRuleParams& p, int64_t i) {
  if (p.cu_seqlens) return {p.cu_seqlens[i], p.cu_seqlens[i + 1] - p.cu_seqlens[i]};
  return {i * p.seq_len, p.seq_len};
}

// `base` moved to token t of a [tokens, per_token] buffer of `elem`-byte elements (nullptr stays
// nullptr: not used).
template <typename Void>
Void* at_token(Void* base, int64_t t, int64_t per_token, int64_t elem) {
  using Byte = std::conditional_t<std::is_const_v<Void>, const char, char>;
  return base ? static_cast<Byte*>(base) + t * per_token * elem : nullptr;
}
// `base` moved to row i of a [rows, per_row] fp32 buffer (nullptr stays nullptr: none given).
template <typename Float>
Float* at_row(Float* base, int64_t i, int64_t per_row) {
  return base ? base + i * per_row : nullptr;
}

// Sequence i of `p` as a problem of its own: one row without cu_seqlens, every token pointer at its
// first token, the state pointers at its row.
inline deltacheck::kernels::GatedDeltaRuleParams sequence_params(
    const deltacheck::kernels::GatedDeltaRuleParams& p, int64_t i) {
  const TokenSpan t = sequence_tokens(p, i);
  const int64_t H = p.num_heads, HV = p.num_value_heads, K = p.key_dim, V = p.value_dim;
  const int64_t es = deltacheck::dtype_size(p.dtype), per_state = HV * K * V;
  deltacheck::kernels::GatedDeltaRuleParams s = p;
  s.batch = 1;
  s.seq_len = t.length;
  s.cu_seqlens = nullptr;
  s.num_seqs = 0;
  s.q = at_token(p.q, t.begin, H * K, es);
  s.k = at_token(p.k, t.begin, H * K, es);
  s.v = at_token(p.v, t.begin, HV * V, es);
  s.g = at_row(p.g, t.begin, HV);
  s.beta = at_token(p.beta, t.begin, HV, es);
  s.o = at_token(p.o, t.begin, HV * V, es);
  s.initial_state = at_row(p.initial_state, i, per_state);
  s.final_state = at_row(p.final_state, i, per_state);
  return s;
}

// ---- the backward ----------------------------------------------------------------------------

// The backward's tensors: the forward's inputs (prepare_gdr_call), the upstream gradients (dht
// undefined: zero) and the gradients, with the backward kernel's parameters pointing at all of
// them. dq, dk, dv, dbeta in the activation dtype, dg and dh0 in fp32 (docs/gradients.md).
struct GdrBackwardCall {
  GdrCall forward;
  at::Tensor d_output, d_final_state;
  at::Tensor dq, dk, dv, dg, dbeta, dh0;
  deltacheck::kernels::GatedDeltaRuleBackwardParams params;
};

inline GdrBackwardCall prepare_gdr_backward(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& g,
                                            const at::Tensor& beta, const at::Tensor& cu_seqlens,
                                            const at::Tensor& initial_state, double scale,
                                            bool use_qk_l2norm, const at::Tensor& d_output,
                                            const at::Tensor& d_final_state) {
  auto given = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  GdrBackwardCall b;
  b.forward = prepare_gdr_call(q, k, v, g, beta, given(cu_seqlens), given(initial_state), scale,
                               use_qk_l2norm);
  const GdrCall& f = b.forward;
  b.d_output = d_output.defined() ? d_output.to(at::kCPU, v.scalar_type()).contiguous()
                                  : at::zeros_like(f.v);
  b.dq = at::zeros_like(f.q);
  b.dk = at::zeros_like(f.k);
  b.dv = at::zeros_like(f.v);
  b.dg = at::zeros_like(f.g);
  b.dbeta = at::zeros_like(f.beta);
  if (d_final_state.defined()) {
    TORCH_CHECK(d_final_state.sizes() == f.final_state.sizes(),
                "the gradient of final_state must be [N, HV, K, V]");
    b.d_final_state = d_final_state.to(at::kCPU, at::kFloat).contiguous();
  }
  // With no tokens at all, each sequence hands its final state's gradient straight back.
  b.dh0 = b.d_final_state.defined() ? b.d_final_state.clone() : at::zeros_like(f.final_state);
  if (f.empty) return b;
  deltacheck::kernels::GatedDeltaRuleBackwardParams& p = b.params;
  p.forward = f.params;
  p.forward.o = nullptr;
  p.forward.final_state = nullptr;
  p.d_output = b.d_output.data_ptr();
  if (b.d_final_state.defined()) p.d_final_state = b.d_final_state.data_ptr<float>();
  p.dq = b.dq.data_ptr();
  p.dk = b.dk.data_ptr();
  p.dv = b.dv.data_ptr();
  p.dg = b.dg.data_ptr<float>();
  p.dbeta = b.dbeta.data_ptr();
  p.dh0 = b.dh0.data_ptr<float>();
  return b;
}

// The right backward: the project's CPU backward kernel on the whole problem.
inline void chunked_backward_kernel(const GdrBackwardCall& b) {
  check_kernel_status(deltacheck::kernels::cpu::gated_delta_rule_backward(b.params),
                      "gated_delta_rule_backward");
}

// The schema kGdrSchema as a C++ function type, for calling an operator through the dispatcher.
using GdrFunctionType = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, double, bool);

// The autograd kernel of an operator of the convention, registered with
//   TORCH_LIBRARY_IMPL(ns, Autograd, m) { m.impl("chunk_gated_delta_rule", &GdrAutograd<Op>::call);
//   }
// forward: the operator's own kernel below autograd (through the dispatcher, so the kernel the
// inputs' device selects), its inputs saved; backward: Op::backward(const GdrBackwardCall&) on
// them with do (the gradient of o) and dht (of final_state; none when final_state was not used),
// returning dq, dk, dv, dg, dbeta and, when an initial state was given, dh0. `Op::kName` is the
// operator's qualified name.
template <typename Op>
struct GdrAutograd : torch::autograd::Function<GdrAutograd<Op>> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, const at::Tensor& g,
                                                const at::Tensor& beta,
                                                const c10::optional<at::Tensor>& cu_seqlens,
                                                const c10::optional<at::Tensor>& initial_state,
                                                double scale, bool use_qk_l2norm) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow(Op::kName, "")
                               .template typed<GdrFunctionType>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [o, final_state] =
        op.call(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
    ctx->save_for_backward({q, k, v, g, beta, cu_seqlens.value_or(at::Tensor()),
                            initial_state.value_or(at::Tensor())});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["use_qk_l2norm"] = use_qk_l2norm;
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined: zero
    return {o, final_state};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list s = ctx->get_saved_variables();
    const GdrBackwardCall b = prepare_gdr_backward(
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], ctx->saved_data["scale"].toDouble(),
        ctx->saved_data["use_qk_l2norm"].toBool(), grads[0], grads[1]);
    if (!b.forward.empty) Op::backward(b);
    // One entry per forward argument: none for cu_seqlens, scale and use_qk_l2norm.
    return {b.dq,
            b.dk,
            b.dv,
            b.dg,
            b.dbeta,
            at::Tensor(),
            s[6].defined() ? b.dh0 : at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }

  static std::tuple<at::Tensor, at::Tensor> call(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const at::Tensor& g,
                                                 const at::Tensor& beta,
                                                 const c10::optional<at::Tensor>& cu_seqlens,
                                                 const c10::optional<at::Tensor>& initial_state,
                                                 double scale, bool use_qk_l2norm) {
    const auto r =
        GdrAutograd::apply(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm);
    return {r[0], r[1]};
  }
};

}  // namespace deltacheck_example
