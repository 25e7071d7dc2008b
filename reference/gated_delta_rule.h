// The gated delta rule in FP64: the oracle every implementation is judged against.
//
// Per sequence and value head, per token t, in this order (docs/semantics.md, "Gated delta rule"):
//   S <- exp(g_t) * S;  u = beta_t * (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale * q_t)
// gated_delta_rule() is the plain recurrence. gated_delta_rule_chunked() is the second
// formulation (chunked WY / UT-transform form) that cross-checks it.
//
// One source, templated on the compute type, gives the FP64 oracle and the same-precision
// baselines the tolerance is measured against (harness/tolerance.h, like CUTLASS's host
// references): the fp32 token recurrence, the fp32 chunked form with chunk-local cumulative
// gates, and the chunked form whose matmul operands are rounded to the activation dtype (or to
// TF32) with fp32 accumulation. Nothing here is shared with the kernels under test.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/rounding.h"

namespace deltacheck::reference {

struct GatedDeltaRuleArgs {
  int64_t batch = 1;                      // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;                    // T
  int64_t num_heads = 1;                  // H  (q, k heads)
  int64_t num_value_heads = 1;            // HV (v, g, beta, o heads); HV % H == 0, blocked mapping
  int64_t key_dim = 0;                    // K
  int64_t value_dim = 0;                  // V
  const double* q = nullptr;              // [B, T, H, K]
  const double* k = nullptr;              // [B, T, H, K]
  const double* v = nullptr;              // [B, T, HV, V]
  const double* g = nullptr;              // [B, T, HV], log-space decay
  const double* beta = nullptr;           // [B, T, HV]
  std::vector<int64_t> cu_seqlens;        // [N + 1]; empty: N = B sequences of length T
  const double* initial_state = nullptr;  // [N, HV, K, V]; nullptr: zeros
  std::optional<double> scale;            // default K^-0.5
  bool use_qk_l2norm = false;             // x / sqrt(sum(x^2) + 1e-6) on q and k
};

struct GatedDeltaRuleResult {
  std::vector<double> output;       // [B, T, HV, V]
  std::vector<double> final_state;  // [N, HV, K, V]
};

// Number of sequences N described by args (cu_seqlens.size() - 1, or B).
int64_t num_sequences(const GatedDeltaRuleArgs& args);

// Throws std::invalid_argument naming the inconsistency when args do not describe a valid problem.
void validate(const GatedDeltaRuleArgs& args);

// FP64 recurrence (the oracle) and FP64 chunked form (its cross-check).
GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& args);
GatedDeltaRuleResult gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, int64_t chunk_size);

// How a baseline computes the rule.
enum class Formulation {
  kRecurrent,  // token by token: S <- exp(g) S; u = beta (v - S^T k); S += k u^T; o = S^T q
  // Chunks of `chunk_size` tokens (never across a sequence boundary) with chunk-local cumulative
  // gates G, decays exp(G_i - G_j), the UT transform T = (I + A)^-1 by forward substitution,
  // w = T (beta exp(G) k), u = T (beta v), v_new = u - w S, o = exp(G) q S + (q k^T * decay) v_new,
  // S <- exp(G_last) S + (k exp(G_last - G))^T v_new: as FLA, FlashInfer and Transformers compute.
  kChunked,
};

struct Arithmetic {
  Formulation form = Formulation::kRecurrent;
  bool fp32 = false;  // compute (and accumulate) in fp32; FP64 otherwise
  // Chunked form only: how matmul operands are read (kTF32: tensor-core fp32; kBF16/kF16:
  // operands in the activation dtype) and which format the intermediates a tensor-core kernel
  // keeps in the activation dtype are stored in (normalized q and k, the UT matrix, w, u, v_new,
  // the state where it enters a matmul, q k^T before it multiplies v_new). The state itself stays
  // fp32 between chunks.
  Rounding operands = Rounding::kNone;
  Rounding stored = Rounding::kNone;
  Rounding output = Rounding::kNone;  // o as the kernel stores it (the activation dtype)
  int64_t chunk_size = 64;
  // Chunked backward only: the chunk's cumulative gates G and dg's reverse cumulative sum
  // accumulated in FP64 and rounded to the compute type once per token, as torch.cumsum computes
  // fp32 on a CPU (FLA's and Transformers' naive chunk functions under autograd); otherwise a
  // running sum in the compute type, as a kernel's loop keeps it.
  // The forward's chunked form does the same for G (jnp.cumsum, torch.cumsum on a CPU).
  bool exact_cumsum = false;
  // Forward only: the format the q/k L2 norm is computed in (kBF16 / kF16: x * x, the sum, the
  // inverse norm and the normalized values each rounded to it, as a model computing the norm
  // on its bf16 activations does; Transformers 4.57); kNone: in the compute type.
  Rounding qk_norm = Rounding::kNone;
  // Autodiff through an activation-dtype graph (the profile autodiff=act): every tensor of the
  // recurrent forward and of its reverse-mode derivative stored in this format, each op computed
  // in fp32 (reference/gated_delta_rule_autodiff.h). Recurrent form only; the fields above other
  // than `form` do not apply to it.
  Rounding graph = Rounding::kNone;
};

std::string describe(const Arithmetic& how);  // e.g. "chunked fp32, bf16 operands, chunk 128"

GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& args, const Arithmetic& how);

}  // namespace deltacheck::reference
