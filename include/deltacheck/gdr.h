// The gated delta rule on raw buffers: a gdr case as the pointers and sizes a kernel takes, and a
// backend made from one kernel function. Semantics (FLA's conventions; docs/semantics.md):
//   per sequence and value head, per token t in order:
//     S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t)
//   with q and k L2-normalized first when use_qk_l2norm (x / sqrt(sum x^2 + 1e-6)); value head i
//   uses q/k head i / (HV / H); each packed sequence starts from its own initial state (zero when
//   initial_state is null) and must never see another sequence's tokens or state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deltacheck/backend.h"
#include "deltacheck/case.h"

namespace deltacheck {

// One call of the rule. Tensors are dense and row-major; q, k, v, beta and o have `dtype`
// (fp32, bf16 or fp16: raw uint16 bits for the half types); g and the states are fp32.
struct GdrProblem {
  int64_t batch = 1;            // B; 1 when cu_seqlens is given
  int64_t seq_len = 0;          // T
  int64_t num_heads = 1;        // H (q, k)
  int64_t num_value_heads = 1;  // HV (v, g, beta, o, states); HV % H == 0
  int64_t key_dim = 0;          // K
  int64_t value_dim = 0;        // V
  DType dtype = DType::kF32;
  const void* q = nullptr;     // [B, T, H, K]
  const void* k = nullptr;     // [B, T, H, K]
  const void* v = nullptr;     // [B, T, HV, V]
  const float* g = nullptr;    // [B, T, HV], log-space decay (<= 0)
  const void* beta = nullptr;  // [B, T, HV]
  // Packed (varlen) input: sequence i is tokens [cu_seqlens[i], cu_seqlens[i+1]) of the one row;
  // zero-length sequences are legal. Null: the B rows are the sequences.
  const int64_t* cu_seqlens = nullptr;   // [num_seqs + 1]
  int64_t num_seqs = 0;                  // N (= B without cu_seqlens)
  const float* initial_state = nullptr;  // [N, HV, K, V], or null: every sequence starts at zero
  void* o = nullptr;                     // [B, T, HV, V], written
  float* final_state = nullptr;          // [N, HV, K, V], written; null: not kept (cache=none)
  float scale = 0.0f;                    // applied to q after the norm: K^-0.5
  bool use_qk_l2norm = false;
};

// A gdr case's call as a GdrProblem pointing into `inputs` and `outputs`; status InvalidArgument
// for other ops, Unsupported for the state-pool modes (cache=pool, cache=spec), which need slot
// indices a GdrProblem does not carry.
struct GdrCall {
  Status status;
  GdrProblem problem;
};
GdrCall gdr_problem(const Case& c, const TensorMap& inputs, TensorMap& outputs);

// A gated delta rule kernel: computes `o` (and `final_state` when not null) for one call.
using GdrFunction = std::function<Status(const GdrProblem& p)>;

struct GdrBackendOptions {
  // The dtypes of q/k/v/beta/o the kernel handles; other cases are unsupported.
  std::vector<DType> dtypes{DType::kF32, DType::kBF16, DType::kF16};
  std::string description = "gated delta rule kernel";
  bool deterministic = true;
};

// A backend for the gdr op from one kernel function. It supports every gdr case in the listed
// dtypes whose cache mode is none, prefill, decode, chunked or dynamic (deltacheck drives the
// chunked and dynamic modes as several calls, carrying final_state into the next initial_state);
// pool and spec are unsupported, and so is every other op.
std::unique_ptr<FunctionBackend> gdr_backend(std::string name, GdrFunction kernel,
                                             GdrBackendOptions options = {});

}  // namespace deltacheck
