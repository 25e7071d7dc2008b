// What both example operators share: checking the tensors of deltacheck's torch-op calling
// convention and pointing the project's CPU kernel (kernels/cpu/gated_delta_rule.h) at them.
// A real operator library would do the same with its own kernel.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <tuple>

#include "kernels/cpu/gated_delta_rule.h"

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

inline void check_kernel_status(const deltacheck::Status& st) {
  TORCH_CHECK(st.ok(), "chunked_gated_delta_rule: ", st.message());
}

}  // namespace deltacheck_example
