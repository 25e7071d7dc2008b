// The gated delta rule in FP64: the oracle every implementation is judged against.
//
// Per sequence and value head, per token t, in this order (DESIGN.md, "Gated delta rule"):
//   S <- exp(g_t) * S;  u = beta_t * (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale * q_t)
// gated_delta_rule() is the plain recurrence. gated_delta_rule_chunked() is an independently
// written second formulation (chunked WY / UT-transform form) that exists only to cross-check the
// first.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

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

GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& args);
GatedDeltaRuleResult gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, int64_t chunk_size);

}  // namespace deltacheck::reference
