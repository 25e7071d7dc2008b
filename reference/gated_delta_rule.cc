// FP64 gated delta rule: the plain recurrence (the oracle) and the chunked WY form (its
// cross-check).
#include "reference/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/parallel_for.h"
#include "core/simd.h"
#include "reference/gated_delta_rule_autodiff.h"

namespace deltacheck::reference {
namespace {

// One (sequence, value head) pair: where its tokens live and which state row it owns.
struct Lane {
  int64_t batch_row;    // b
  int64_t token_begin;  // first token within the row
  int64_t length;       // number of tokens
  int64_t seq;          // state row n
  int64_t value_head;   // hv
};

// Runs fn(i) for i in [0, n) on all hardware threads (the pool of core/parallel_for.h, whose
// threads are kept between calls). The oracle is plain loops, but it is run on every case of every
// suite, so independent (sequence, head) lanes are spread over the cores.
template <typename Fn>
void for_each_lane(int64_t n, Fn&& fn) {
  core::parallel_for(n, 0, fn);
}

std::vector<Lane> make_lanes(const GatedDeltaRuleArgs& a) {
  std::vector<Lane> lanes;
  const int64_t n = num_sequences(a);
  for (int64_t s = 0; s < n; ++s) {
    int64_t row = a.cu_seqlens.empty() ? s : 0;
    int64_t begin = a.cu_seqlens.empty() ? 0 : a.cu_seqlens[s];
    int64_t len = a.cu_seqlens.empty() ? a.seq_len : a.cu_seqlens[s + 1] - a.cu_seqlens[s];
    for (int64_t h = 0; h < a.num_value_heads; ++h) lanes.push_back({row, begin, len, s, h});
  }
  return lanes;
}

// Copies q or k of one token and head in the compute type, applying the optional L2 norm and a
// factor.
template <typename T>
DELTACHECK_ALWAYS_INLINE void load_qk(const GatedDeltaRuleArgs& a, const double* src, int64_t row,
                                      int64_t t, int64_t head, T factor, T* dst,
                                      Rounding norm = Rounding::kNone) {
  const int64_t K = a.key_dim;
  const double* x = src + ((row * a.seq_len + t) * a.num_heads + head) * K;
  T inv = T(1);
  if (a.use_qk_l2norm) {
    // In `norm` (the activation dtype) every step is a tensor of that dtype: x * x, the sum
    // (accumulated in T), the sum plus eps, the inverse norm and x times it.
    T ss = T(0);
    for (int64_t i = 0; i < K; ++i) ss += round_to(norm, T(T(x[i]) * T(x[i])));
    inv = round_to(norm, T(T(1) / std::sqrt(round_to(norm, T(round_to(norm, ss) + T(1e-6))))));
  }
  if (norm == Rounding::kNone || !a.use_qk_l2norm) {
    for (int64_t i = 0; i < K; ++i) dst[i] = T(x[i]) * inv * factor;
  } else {
    for (int64_t i = 0; i < K; ++i) dst[i] = round_to(norm, T(T(x[i]) * inv)) * factor;
  }
}

double resolved_scale(const GatedDeltaRuleArgs& a) {
  return a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(static_cast<double>(a.key_dim));
}

}  // namespace

int64_t num_sequences(const GatedDeltaRuleArgs& a) {
  return a.cu_seqlens.empty() ? a.batch : static_cast<int64_t>(a.cu_seqlens.size()) - 1;
}

void validate(const GatedDeltaRuleArgs& a) {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (a.batch < 1 || a.seq_len < 0) fail("batch must be >= 1 and seq_len >= 0");
  if (a.num_heads < 1 || a.num_value_heads < 1 || a.key_dim < 1 || a.value_dim < 1)
    fail("head counts and head dims must be >= 1");
  if (a.num_value_heads % a.num_heads != 0)
    fail("HV % H != 0 (HV=" + std::to_string(a.num_value_heads) +
         ", H=" + std::to_string(a.num_heads) + ")");
  if (a.batch * a.seq_len > 0 && (!a.q || !a.k || !a.v || !a.g || !a.beta))
    fail("q, k, v, g and beta are required");
  if (!a.cu_seqlens.empty()) {
    if (a.batch != 1) fail("cu_seqlens requires batch == 1");
    if (a.cu_seqlens.size() < 2) fail("cu_seqlens needs at least 2 entries");
    if (a.cu_seqlens.front() != 0) fail("cu_seqlens must start at 0");
    if (a.cu_seqlens.back() != a.seq_len) fail("cu_seqlens must end at T");
    for (size_t i = 1; i < a.cu_seqlens.size(); ++i)
      if (a.cu_seqlens[i] < a.cu_seqlens[i - 1])
        fail("cu_seqlens is decreasing at index " + std::to_string(i));
  }
  if (a.scale.has_value() && !std::isfinite(*a.scale)) fail("scale must be finite");
}

namespace {

// round_to(op, round_to(st, x)): a value stored in the activation dtype, then read as an operand.
template <typename T>
DELTACHECK_ALWAYS_INLINE T round2(Rounding op, Rounding st, T x) {
  return round_to(op, round_to(st, x));
}

// NAME_dispatch<T>(avx2, args...): NAME<T>(args...) compiled twice, for baseline x86-64 and as an
// AVX2 clone (core/simd.h), the clone run when `avx2`. Neither uses FMA (no "fma" target, and the
// reference is built with -ffp-contract=off) nor reorders a sum (no -ffast-math): the clone does
// the same operations on the same values in the same order, in wider registers, so both give the
// same bits (tests/reference/test_baseline_bits.cc runs both).
#if DELTACHECK_X86_CLONES
#define DELTACHECK_CLONES(NAME, PARAMS, ARGS)       \
  template <typename T>                             \
  void NAME##_portable PARAMS {                     \
    NAME<T> ARGS;                                   \
  }                                                 \
  template <typename T>                             \
  DELTACHECK_TARGET_AVX2 void NAME##_avx2 PARAMS {  \
    NAME<T> ARGS;                                   \
  }                                                 \
  template <typename T, typename... A>              \
  void NAME##_dispatch(bool avx2, A&&... args) {    \
    if (avx2)                                       \
      NAME##_avx2<T>(std::forward<A>(args)...);     \
    else                                            \
      NAME##_portable<T>(std::forward<A>(args)...); \
  }
#else
#define DELTACHECK_CLONES(NAME, PARAMS, ARGS) \
  template <typename T, typename... A>        \
  void NAME##_dispatch(bool, A&&... args) {   \
    NAME<T>(std::forward<A>(args)...);        \
  }
#endif

// The token recurrence in compute type T; o rounded to `output` as the kernel stores it.
// One lane of it, writing its rows of r.
template <typename T>
DELTACHECK_ALWAYS_INLINE void recurrent_lane(const GatedDeltaRuleArgs& a, Rounding output,
                                             Rounding norm, const Lane& L,
                                             GatedDeltaRuleResult& r) {
  const int64_t K = a.key_dim, V = a.value_dim, H = a.num_heads, HV = a.num_value_heads;
  const int64_t group = HV / H;
  const T scale = static_cast<T>(resolved_scale(a));
  {
    const int64_t qk_head = L.value_head / group;
    std::vector<T> S(static_cast<size_t>(K * V), T(0));  // [K][V]
    if (a.initial_state) {
      const double* s0 = a.initial_state + (L.seq * HV + L.value_head) * K * V;
      for (int64_t i = 0; i < K * V; ++i) S[i] = static_cast<T>(s0[i]);
    }
    std::vector<T> q(K), k(K), u(V), o(V);
    for (int64_t t = L.token_begin; t < L.token_begin + L.length; ++t) {
      const int64_t tok = (L.batch_row * a.seq_len + t) * HV + L.value_head;
      load_qk<T>(a, a.q, L.batch_row, t, qk_head, scale, q.data(), norm);
      load_qk<T>(a, a.k, L.batch_row, t, qk_head, T(1), k.data(), norm);
      const T decay = std::exp(static_cast<T>(a.g[tok]));
      const T beta = static_cast<T>(a.beta[tok]);
      const double* v = a.v + tok * V;
      // The four steps of the rule in two passes over the rows of S (each element still sees
      // the steps in order; the sums over i run in the same order as four separate passes).
      // S <- exp(g) S  and  u = S^T k
      for (int64_t j = 0; j < V; ++j) u[j] = T(0);
      for (int64_t i = 0; i < K; ++i) {
        T* Si = S.data() + i * V;
        const T ki = k[i];
        for (int64_t j = 0; j < V; ++j) {
          Si[j] *= decay;
          u[j] += Si[j] * ki;
        }
      }
      // u = beta (v - S^T k)
      for (int64_t j = 0; j < V; ++j) u[j] = beta * (static_cast<T>(v[j]) - u[j]);
      // S <- S + k u^T  and  o = S^T (scale q)
      for (int64_t j = 0; j < V; ++j) o[j] = T(0);
      for (int64_t i = 0; i < K; ++i) {
        T* Si = S.data() + i * V;
        const T ki = k[i], qi = q[i];
        for (int64_t j = 0; j < V; ++j) {
          Si[j] += ki * u[j];
          o[j] += Si[j] * qi;
        }
      }
      double* out = r.output.data() + tok * V;
      for (int64_t j = 0; j < V; ++j) out[j] = static_cast<double>(round_to(output, o[j]));
    }
    double* fs = r.final_state.data() + (L.seq * HV + L.value_head) * K * V;
    for (int64_t i = 0; i < K * V; ++i) fs[i] = static_cast<double>(S[i]);
  }
}
DELTACHECK_CLONES(recurrent_lane,
                  (const GatedDeltaRuleArgs& a, Rounding output, Rounding norm, const Lane& L,
                   GatedDeltaRuleResult& r),
                  (a, output, norm, L, r))

// A zeroed result for a's shapes, then lane(avx2, L, r) on every lane L, spread over threads.
template <typename LaneFn>
GatedDeltaRuleResult run_lanes(const GatedDeltaRuleArgs& a, LaneFn&& lane) {
  const int64_t K = a.key_dim, V = a.value_dim, HV = a.num_value_heads;
  GatedDeltaRuleResult r;
  r.output.assign(static_cast<size_t>(a.batch * a.seq_len * HV * V), 0.0);
  r.final_state.assign(static_cast<size_t>(num_sequences(a) * HV * K * V), 0.0);
  const std::vector<Lane> lanes = make_lanes(a);
  const bool avx2 = core::use_avx2();
  for_each_lane(static_cast<int64_t>(lanes.size()), [&](int64_t li) { lane(avx2, lanes[li], r); });
  return r;
}

template <typename T>
GatedDeltaRuleResult recurrent(const GatedDeltaRuleArgs& a, Rounding output,
                               Rounding norm = Rounding::kNone) {
  validate(a);
  return run_lanes(a, [&](bool avx2, const Lane& L, GatedDeltaRuleResult& r) {
    recurrent_lane_dispatch<T>(avx2, a, output, norm, L, r);
  });
}

// s[j] = sum over m in [0, rows) of coef[m] * M[m * stride + j], for j < cols: each sum from zero
// in increasing m, as a dot product computes it, with the sums of all j side by side (vectorized
// without reordering any of them); with `accumulate`, the sums start from s's values instead. Four
// rows per pass keep s in registers longer; each element's additions stay in order (the reference
// is built without contraction into FMA).
template <typename T>
DELTACHECK_ALWAYS_INLINE void combine_rows(const T* coef, int64_t rows, const T* M, int64_t stride,
                                           int64_t cols, T* __restrict s, bool accumulate = false) {
  if (!accumulate)
    for (int64_t j = 0; j < cols; ++j) s[j] = T(0);
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    const T c0 = coef[m], c1 = coef[m + 1], c2 = coef[m + 2], c3 = coef[m + 3];
    const T* __restrict r0 = M + m * stride;
    const T* __restrict r1 = r0 + stride;
    const T* __restrict r2 = r1 + stride;
    const T* __restrict r3 = r2 + stride;
    for (int64_t j = 0; j < cols; ++j)
      s[j] = (((s[j] + c0 * r0[j]) + c1 * r1[j]) + c2 * r2[j]) + c3 * r3[j];
  }
  for (; m < rows; ++m) {
    const T cm = coef[m];
    const T* __restrict row = M + m * stride;
    for (int64_t j = 0; j < cols; ++j) s[j] += cm * row[j];
  }
}

// The chunked form in compute type T (see Formulation::kChunked). With operands and stored both
// kNone it is the plain chunked algorithm; a rounding models where a tensor-core kernel reads
// matmul operands in a narrower format (`op`) and keeps intermediates in the activation dtype
// (`st`).
// One lane of it, writing its rows of r.
template <typename T>
DELTACHECK_ALWAYS_INLINE void chunked_lane(const GatedDeltaRuleArgs& a, const Arithmetic& how,
                                           const Lane& L, GatedDeltaRuleResult& r) {
  const int64_t C = how.chunk_size;
  const int64_t K = a.key_dim, V = a.value_dim, H = a.num_heads, HV = a.num_value_heads;
  const int64_t group = HV / H;
  const T scale = static_cast<T>(resolved_scale(a));
  const Rounding op = how.operands, st = how.stored;
  {
    const int64_t qk_head = L.value_head / group;
    std::vector<T> S(static_cast<size_t>(K * V), T(0));  // [K][V], kept in T between chunks
    if (a.initial_state) {
      const double* s0 = a.initial_state + (L.seq * HV + L.value_head) * K * V;
      for (int64_t i = 0; i < K * V; ++i) S[i] = static_cast<T>(s0[i]);
    }
    // Per chunk: q and k as matmul operands, v, gates, betas, the UT matrix, w, u, v_new, and the
    // state as an operand.
    std::vector<T> Q(C * K), Kc(C * K), Vc(C * V), G(C), B(C), A(C * C), Tm(C * C), KB(C * K),
        VB(C * V), W(C * K), U(C * V), Vn(C * V), Sop(K * V), O(V);
    // Every sum below runs over its index in increasing order from zero, element by element, as
    // the formulas read; the loops are nested so that the innermost one runs over independent
    // elements (sums of different outputs side by side), which the compiler vectorizes without
    // reordering any sum: the bits are those of one dot product at a time. KcT is k transposed
    // ([K][C]) for the dot products of every pair of tokens; acc holds sums in progress.
    // D holds the rows of v_new that update the state, decayed to the chunk end.
    std::vector<T> KcT(K * C), acc(std::max({C, K, V})), D(C * V);
    for (int64_t c0 = 0; c0 < L.length; c0 += C) {
      const int64_t n = std::min(C, L.length - c0);
      T cum = T(0);
      double exact = 0.0;  // how.exact_cumsum: the gates' sum in FP64, rounded once per token
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = L.token_begin + c0 + t;
        const int64_t tok = (L.batch_row * a.seq_len + pos) * HV + L.value_head;
        load_qk<T>(a, a.q, L.batch_row, pos, qk_head, T(1), &Q[t * K], how.qk_norm);
        load_qk<T>(a, a.k, L.batch_row, pos, qk_head, T(1), &Kc[t * K], how.qk_norm);
        for (int64_t i = 0; i < K; ++i) {
          Q[t * K + i] = round2(op, st, Q[t * K + i]);
          Kc[t * K + i] = round2(op, st, Kc[t * K + i]);
          KcT[i * C + t] = Kc[t * K + i];
        }
        for (int64_t j = 0; j < V; ++j) Vc[t * V + j] = static_cast<T>(a.v[tok * V + j]);
        cum += static_cast<T>(a.g[tok]);  // chunk-local cumulative gate
        exact += static_cast<double>(static_cast<T>(a.g[tok]));
        G[t] = how.exact_cumsum ? static_cast<T>(exact) : cum;
        B[t] = static_cast<T>(a.beta[tok]);
      }
      T* const s = acc.data();
      // dots_with_keys: s[j] = x . k_j for the tokens j < count (x: K values), each sum over i in
      // order: combine_rows(x, K, KcT.data(), C, count, s).
      // A_tj = beta_t exp(G_t - G_j) (k_t . k_j), j < t; T = (I + A)^-1 by forward substitution.
      for (int64_t t = 0; t < n; ++t) {
        combine_rows(&Kc[t * K], K, KcT.data(), C, t, s);  // dots_with_keys
        for (int64_t j = 0; j < t; ++j) A[t * n + j] = B[t] * std::exp(G[t] - G[j]) * s[j];
      }
      for (int64_t i = 0; i < n * n; ++i) Tm[i] = T(0);
      // Row t of T: T_t,col = -sum_{j = col}^{t - 1} A_tj T_j,col (rows before t are complete;
      // T_j,col is zero for j < col, so the sums start at j = col as the formula reads).
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t col = 0; col < t; ++col) s[col] = T(0);
        for (int64_t j = 0; j < t; ++j) {
          const T atj = A[t * n + j];
          const T* tj = &Tm[j * n];
          for (int64_t col = 0; col <= j; ++col) s[col] += atj * tj[col];
        }
        for (int64_t col = 0; col < t; ++col) Tm[t * n + col] = -s[col];
        Tm[t * n + t] = T(1);
      }
      for (int64_t i = 0; i < n * n; ++i) Tm[i] = round2(op, st, Tm[i]);
      // w = T (beta exp(G) k),  u = T (beta v)
      for (int64_t t = 0; t < n; ++t) {
        const T eg = std::exp(G[t]);
        for (int64_t i = 0; i < K; ++i) KB[t * K + i] = round2(op, st, Kc[t * K + i] * B[t] * eg);
        for (int64_t j = 0; j < V; ++j) VB[t * V + j] = round2(op, st, Vc[t * V + j] * B[t]);
      }
      for (int64_t t = 0; t < n; ++t) {
        combine_rows(&Tm[t * n], t + 1, KB.data(), K, K, s);
        for (int64_t i = 0; i < K; ++i) W[t * K + i] = round2(op, st, s[i]);
        combine_rows(&Tm[t * n], t + 1, VB.data(), V, V, s);
        for (int64_t j = 0; j < V; ++j) U[t * V + j] = round_to(st, s[j]);
      }
      // The state as a matmul operand; v_new = u - w S.
      for (int64_t i = 0; i < K * V; ++i) Sop[i] = round2(op, st, S[i]);
      for (int64_t t = 0; t < n; ++t) {
        combine_rows(&W[t * K], K, Sop.data(), V, V, s);
        for (int64_t j = 0; j < V; ++j) Vn[t * V + j] = round2(op, st, U[t * V + j] - s[j]);
      }
      // o = scale (exp(G) q S + (q k^T * decay)_{j<=t} v_new)
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = L.token_begin + c0 + t;
        const int64_t tok = (L.batch_row * a.seq_len + pos) * HV + L.value_head;
        const T eg = std::exp(G[t]);
        combine_rows(&Q[t * K], K, Sop.data(), V, V, s);
        for (int64_t j = 0; j < V; ++j) O[j] = eg * s[j];
        combine_rows(&Q[t * K], K, KcT.data(), C, t + 1, s);  // dots_with_keys
        for (int64_t m = 0; m <= t; ++m) s[m] = round2(op, st, std::exp(G[t] - G[m]) * s[m]);
        combine_rows(s, t + 1, Vn.data(), V, V, O.data(), true);
        double* out = r.output.data() + tok * V;
        for (int64_t j = 0; j < V; ++j)
          out[j] = static_cast<double>(round_to(how.output, T(scale * O[j])));
      }
      // S <- exp(G_last) S + sum_m k_m (exp(G_last - G_m) v_new_m)^T
      const T glast = G[n - 1], eglast = std::exp(glast);
      for (int64_t i = 0; i < K * V; ++i) S[i] *= eglast;
      for (int64_t m = 0; m < n; ++m) {
        const T d = std::exp(glast - G[m]);
        for (int64_t j = 0; j < V; ++j) D[m * V + j] = round2(op, st, Vn[m * V + j] * d);
      }
      // Row i of S gains k_m,i D_m for m in order: row i of k transposed combines the rows of D.
      for (int64_t i = 0; i < K; ++i) combine_rows(&KcT[i * C], n, D.data(), V, V, &S[i * V], true);
    }
    double* fs = r.final_state.data() + (L.seq * HV + L.value_head) * K * V;
    for (int64_t i = 0; i < K * V; ++i) fs[i] = static_cast<double>(S[i]);
  }
}
DELTACHECK_CLONES(chunked_lane,
                  (const GatedDeltaRuleArgs& a, const Arithmetic& how, const Lane& L,
                   GatedDeltaRuleResult& r),
                  (a, how, L, r))

template <typename T>
GatedDeltaRuleResult chunked(const GatedDeltaRuleArgs& a, const Arithmetic& how) {
  validate(a);
  if (how.chunk_size < 1) throw std::invalid_argument("chunk_size must be >= 1");
  return run_lanes(a, [&](bool avx2, const Lane& L, GatedDeltaRuleResult& r) {
    chunked_lane_dispatch<T>(avx2, a, how, L, r);
  });
}

}  // namespace

const char* rounding_name(Rounding r) {
  switch (r) {
    case Rounding::kTF32:
      return "tf32";
    case Rounding::kBF16:
      return "bf16";
    case Rounding::kF16:
      return "fp16";
    case Rounding::kNone:
      break;
  }
  return "none";
}

std::string describe(const Arithmetic& how) {
  std::string s = how.form == Formulation::kRecurrent ? "recurrent" : "chunked";
  s += how.fp32 ? " fp32" : " fp64";
  if (how.operands != Rounding::kNone)
    s += std::string(", ") + rounding_name(how.operands) + " operands";
  if (how.exact_cumsum) s += ", exact cumsum";
  if (how.form == Formulation::kChunked && how.chunk_size != 64)
    s += ", chunk " + std::to_string(how.chunk_size);
  if (how.qk_norm != Rounding::kNone)
    s += std::string(", ") + rounding_name(how.qk_norm) + " l2norm";
  if (how.graph != Rounding::kNone)
    s += std::string(", autodiff through a ") + rounding_name(how.graph) + " graph";
  return s;
}

GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& a, const Arithmetic& how) {
  if (how.graph != Rounding::kNone) return gated_delta_rule_autodiff(a, how.graph);
  if (how.form == Formulation::kRecurrent)
    return how.fp32 ? recurrent<float>(a, how.output, how.qk_norm)
                    : recurrent<double>(a, how.output, how.qk_norm);
  return how.fp32 ? chunked<float>(a, how) : chunked<double>(a, how);
}

GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& a) {
  return recurrent<double>(a, Rounding::kNone);
}

GatedDeltaRuleResult gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, int64_t chunk_size) {
  Arithmetic how;
  how.form = Formulation::kChunked;
  how.chunk_size = chunk_size;
  return chunked<double>(a, how);
}

}  // namespace deltacheck::reference
