// Mamba2's state-space duality (SSD) forward in FP64: the oracle of the `ssd` op, and the
// same-precision baselines its tolerance is measured against (docs/semantics.md, "Mamba2 SSD").
//
// Per sequence and head h (group g = h / (H / G)), per token t, in this order:
//   dt_t = clamp(softplus(dt_raw_t + dt_bias_h), dt_min, dt_max)
//   S   <- exp(dt_t A_h) S + dt_t x_t B_t^T          (S: [P, N])
//   y_t  = S C_t + D_h x_t;   y_t <- y_t * silu(z_t) when z is given
// ssd_recurrent.cc is that recurrence; ssd_chunked.cc the chunked form with segment sums that
// mamba_ssm's mamba_chunk_scan_combined and vLLM's SSD kernels compute (chunk 256 by default). One
// source each, templated on the compute type: FP64 for the oracle, fp32 (and fp32 with matmul
// operands rounded to the activation dtype) for the baselines. Nothing here is shared with the
// kernels under test (kernels/cpu/ssd.*).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "reference/rounding.h"

namespace deltacheck::reference {

struct SsdArgs {
  int64_t batch = 1;                // B; must be 1 when cu_seqlens is given
  int64_t seq_len = 0;              // T
  int64_t num_heads = 1;            // H
  int64_t head_dim = 0;             // P
  int64_t num_groups = 1;           // G; H % G == 0, head h reads group h / (H / G)
  int64_t state_dim = 0;            // N (d_state)
  const double* x = nullptr;        // [B, T, H, P]
  const double* dt = nullptr;       // [B, T, H], raw (before dt_bias and softplus)
  const double* dt_bias = nullptr;  // [H]; nullptr: zeros
  const double* A = nullptr;        // [H], A = -exp(A_log) (the kernels' input)
  const double* Bm = nullptr;       // B: [B, T, G, N]
  const double* Cm = nullptr;       // C: [B, T, G, N]
  const double* D = nullptr;        // [H]; nullptr: no skip
  const double* z = nullptr;        // [B, T, H, P]; nullptr: no gate
  bool dt_softplus = true;          // softplus(dt + dt_bias); false: dt + dt_bias as is
  double dt_min = 0.0;              // the dt_limit clamp, after the softplus
  double dt_max = std::numeric_limits<double>::infinity();
  std::vector<int64_t> cu_seqlens;        // [Nseq + 1]; empty: Nseq = B sequences of length T
  const double* initial_state = nullptr;  // [Nseq, H, P, N]; nullptr: zeros
};

struct SsdResult {
  std::vector<double> y;            // [B, T, H, P]
  std::vector<double> final_state;  // [Nseq, H, P, N]
};

int64_t num_sequences(const SsdArgs& args);
// Throws std::invalid_argument naming the inconsistency when args do not describe a problem.
void validate(const SsdArgs& args);
// The discretized step of one token and head in FP64: clamp(softplus(dt + bias), dt_min, dt_max),
// softplus(x) = log1p(exp(x)) exactly (the kernels' x > 20 shortcut differs by < 2e-9 x).
double ssd_step(const SsdArgs& args, double dt_raw, int64_t head);

enum class SsdForm {
  kRecurrent,  // token by token (as selective_state_update and the Transformers decode path)
  // Chunks of `chunk_size` tokens, never across a sequence boundary: cumulative dA in the chunk,
  // the intra-chunk term (C B^T) * exp(segsum) * dt times x, the inter-chunk term exp(dA_cs) C S,
  // the chunk's state exp(dA_last) S + x^T (B exp(dA_last - dA_cs) dt): mamba_ssm's
  // _chunk_cumsum / _chunk_state / _state_passing / _chunk_scan.
  kChunked,
};

struct SsdArithmetic {
  SsdForm form = SsdForm::kRecurrent;
  bool fp32 = false;  // compute and accumulate in fp32; FP64 otherwise
  // Chunked form: the format of the matmul operands a tensor-core kernel reads (C and B, the
  // scaled C B^T before it multiplies x, the state before C reads it, B scaled by the decay
  // before it multiplies x); the state itself stays in the compute type between chunks.
  Rounding operands = Rounding::kNone;
  Rounding output = Rounding::kNone;  // y as the kernel stores it (the activation dtype)
  int64_t chunk_size = 256;
  // The softplus as log(exp(x) + 1) (vLLM's Triton 3 softplus, in its SSD and
  // selective_state_update kernels); log1p(exp(x)) otherwise (mamba_ssm, older Triton).
  bool softplus_log_exp = false;
};

std::string describe(const SsdArithmetic& how);  // e.g. "ssd chunked fp32, bf16 operands"

// The oracle: the FP64 token recurrence.
SsdResult ssd(const SsdArgs& args);
// A formulation in a compute type (the baselines, and the FP64 chunked cross-check).
SsdResult ssd(const SsdArgs& args, const SsdArithmetic& how);
SsdResult ssd_recurrent(const SsdArgs& args, const SsdArithmetic& how);  // ssd_recurrent.cc
SsdResult ssd_chunked(const SsdArgs& args, const SsdArithmetic& how);    // ssd_chunked.cc

namespace ssd_detail {
// ssd_step in compute type T (the baselines discretize in fp32, as the kernels do).
// log_exp: softplus as log(exp(x) + 1), whose 1 + exp(x) rounds away the digits of a small step
// (vLLM's Triton 3 kernels); else log1p(exp(x)).
template <typename T>
T step(const SsdArgs& a, double dt_raw, int64_t head, bool log_exp = false) {
  T v = static_cast<T>(dt_raw) + (a.dt_bias ? static_cast<T>(a.dt_bias[head]) : T(0));
  if (a.dt_softplus) v = log_exp ? std::log(std::exp(v) + T(1)) : std::log1p(std::exp(v));
  if (v < static_cast<T>(a.dt_min)) v = static_cast<T>(a.dt_min);
  if (v > static_cast<T>(a.dt_max)) v = static_cast<T>(a.dt_max);
  return v;
}
// y = (acc + D x) * silu(z) for one element, rounded to `output`.
template <typename T>
double finish(const SsdArgs& a, T acc, int64_t head, int64_t elem, Rounding output) {
  T y = acc;
  if (a.D) y += static_cast<T>(a.D[head]) * static_cast<T>(a.x[elem]);
  if (a.z) {
    const T z = static_cast<T>(a.z[elem]);
    y *= z / (T(1) + std::exp(-z));
  }
  return static_cast<double>(round_to(output, y));
}
// One (sequence, head) lane of an SSD problem: where its tokens are and which state it owns.
struct Lane {
  int64_t row, begin, length, seq, head;
};
std::vector<Lane> lanes(const SsdArgs& a);
// A zeroed result of a's shapes with the initial states copied into final_state.
SsdResult empty_result(const SsdArgs& a);
// Runs lane(L, g, S, r) on every lane, spread over threads: g the lane's B/C group, S its state
// [P][N] in T (the initial state or zeros), written back to r.final_state afterwards.
template <typename T, typename Fn>
SsdResult for_each_lane(const SsdArgs& a, Fn lane) {
  SsdResult r = empty_result(a);
  const std::vector<Lane> all = lanes(a);
  const int64_t per = a.head_dim * a.state_dim, heads_per_group = a.num_heads / a.num_groups;
  core::parallel_for(static_cast<int64_t>(all.size()), 0, [&](int64_t i) {
    const Lane& L = all[i];
    double* state = r.final_state.data() + (L.seq * a.num_heads + L.head) * per;
    std::vector<T> S(state, state + per);
    lane(L, L.head / heads_per_group, S, r);
    for (int64_t j = 0; j < per; ++j) state[j] = static_cast<double>(S[j]);
  });
  return r;
}
}  // namespace ssd_detail

}  // namespace deltacheck::reference
