// FP64 backward of the gated delta rule: per (sequence, key head), each value head of the group
// replays the forward with the state kept at every block boundary, then runs the reverse
// recurrence block by block; the group's q / k gradients go through the norm at the end.
#include "reference/gated_delta_rule_backward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/parallel_for.h"
#include "reference/gated_delta_rule_autodiff.h"

namespace deltacheck::reference {
namespace {

// Tokens between stored states: memory per lane is (T / kBlock + kBlock) K V doubles, not T K V.
constexpr int64_t kBlock = 64;

// One (sequence, key head) pair and its group of value heads.
struct Lane {
  int64_t row, begin, length, seq, head;
};

// The forward's checks, except that cu_seqlens may end before T (a padding tail).
void validate_backward(const GatedDeltaRuleArgs& a, const double* d_output) {
  GatedDeltaRuleArgs checked = a;
  if (!a.cu_seqlens.empty() && a.cu_seqlens.back() < a.seq_len) {
    if (a.cu_seqlens.back() < 0) throw std::invalid_argument("cu_seqlens[-1] must be >= 0");
    checked.cu_seqlens.push_back(a.seq_len);  // the tail as one more sequence, for the checks only
  }
  validate(checked);
  if (!d_output && a.batch * a.seq_len > 0)
    throw std::invalid_argument("d_output (the gradient of o) is required");
}

// x_hat = x / sqrt(sum(x^2) + 1e-6) (or x itself without the norm), in compute type T; returns
// the factor.
template <typename T>
T normalize(const double* x, int64_t K, bool l2, T* x_hat) {
  T r = T(1);
  if (l2) {
    T ss = T(0);
    for (int64_t i = 0; i < K; ++i) ss += T(x[i]) * T(x[i]);
    r = T(1) / std::sqrt(ss + T(1e-6));
  }
  for (int64_t i = 0; i < K; ++i) x_hat[i] = T(x[i]) * r;
  return r;
}

// Everything the reverse pass of one token needs from its forward step.
template <typename T>
struct TokenView {
  const T* q;  // scale * q_hat [K]
  const T* k;  // k_hat [K]
  T decay, beta;
};

// One forward step on S ([K][V]): S <- decay S; err = v - S^T k; u = beta err; S += k u^T.
// `op`: how a tensor-core kernel reads the state as a matmul operand (kNone: as it is).
template <typename T>
void forward_step(const TokenView<T>& tv, const double* v, int64_t K, int64_t V, T* S, T* err, T* u,
                  Rounding op) {
  for (int64_t j = 0; j < V; ++j) err[j] = T(0);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) {
      S[i * V + j] *= tv.decay;
      err[j] += round_to(op, S[i * V + j]) * tv.k[i];
    }
  for (int64_t j = 0; j < V; ++j) {
    err[j] = T(v[j]) - err[j];
    u[j] = tv.beta * err[j];
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] += tv.k[i] * round_to(op, u[j]);
}

// One value head of one sequence in the chunked form (Formulation::kChunked), as FLA's naive
// chunk_gated_delta_rule and Transformers' torch_chunk_gated_delta_rule compute it under
// autograd, derived by hand. Per chunk of C tokens (never across the sequence's end), in compute
// type R: G = cumsum(g) within the chunk, L_ij = exp(G_i - G_j) (j <= i), kb = beta k,
// vb = beta v, M = strictly_lower(kb k^T * L), Tm = (I + M)^-1 (forward substitution),
// u = Tm vb, w = Tm (kb exp(G)), v_new = u - w S, o = exp(G) q S + tril(q k^T * L) v_new,
// S' = exp(G_last) S + (k exp(G_last - G))^T v_new. The reverse pass takes each step back, with
// dTm -> dM = -Tm^T dTm Tm^T and dg as the reverse cumulative sum of dG over the chunk (the
// form autograd of cumsum gives, which loses the small dg of strongly decayed tokens in fp32).
// `q` holds the scaled normalized queries, `k` the normalized keys ([n][K]); `dq`, `dk`
// accumulate the gradients w.r.t. them; `tok(t)` is token t's index into the [.., HV] arrays.
template <typename R, typename Tok>
void chunked_head(const GatedDeltaRuleArgs& a, const double* d_output, int64_t n, int64_t C,
                  const R* q, const R* k, Tok tok, R* S0, R* dS, R* dq, R* dk,
                  GatedDeltaRuleGradients& r, Rounding op, Rounding out, bool exact_cumsum) {
  const int64_t K = a.key_dim, V = a.value_dim, KV = K * V;
  const int64_t chunks = (n + C - 1) / C;
  // The state at the start of every chunk (forward).
  std::vector<R> starts(static_cast<size_t>((chunks + 1) * KV));
  std::copy(S0, S0 + KV, starts.begin());
  std::vector<R> G(C), Lm(C * C), kb(C * K), kbe(C * K), vb(C * V), Tm(C * C), u(C * V), w(C * K),
      vnew(C * V), Aqk(C * C), qe(C * K), kd(C * K);
  // Everything of one chunk's forward, from its start state S.
  auto forward = [&](int64_t c, const R* S) -> int64_t {
    const int64_t t0 = c * C, m = std::min(C, n - t0);
    R acc = R(0);
    double exact = 0.0;  // exact_cumsum: the sum of the gates as R, rounded once per token
    for (int64_t i = 0; i < m; ++i)
      G[i] = exact_cumsum ? R(exact += static_cast<double>(R(a.g[tok(t0 + i)])))
                          : acc += R(a.g[tok(t0 + i)]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j <= i; ++j) Lm[i * C + j] = std::exp(G[i] - G[j]);
    for (int64_t i = 0; i < m; ++i) {
      const R b = R(a.beta[tok(t0 + i)]), eg = std::exp(G[i]), egl = std::exp(G[m - 1] - G[i]);
      for (int64_t x = 0; x < K; ++x) {
        kb[i * K + x] = b * k[(t0 + i) * K + x];
        kbe[i * K + x] = kb[i * K + x] * eg;
        qe[i * K + x] = q[(t0 + i) * K + x] * eg;
        kd[i * K + x] = k[(t0 + i) * K + x] * egl;
      }
      for (int64_t y = 0; y < V; ++y) vb[i * V + y] = b * R(a.v[tok(t0 + i) * V + y]);
    }
    // Tm row i = e_i - sum_{j < i} M_ij Tm row j, M_ij = (kb_i . k_j) L_ij.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t x = 0; x < m; ++x) Tm[i * C + x] = R(x == i);
      for (int64_t j = 0; j < i; ++j) {
        R d = R(0);
        for (int64_t x = 0; x < K; ++x) d += kb[i * K + x] * k[(t0 + j) * K + x];
        const R mij = d * Lm[i * C + j];
        for (int64_t x = 0; x <= j; ++x) Tm[i * C + x] -= mij * Tm[j * C + x];
      }
      for (int64_t j = 0; j <= i; ++j) {
        R d = R(0);
        for (int64_t x = 0; x < K; ++x) d += q[(t0 + i) * K + x] * k[(t0 + j) * K + x];
        Aqk[i * C + j] = d * Lm[i * C + j];
      }
    }
    for (int64_t e = 0; e < m * C; ++e) Tm[e] = round_to(op, Tm[e]);  // stored as an operand
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t y = 0; y < V; ++y) u[i * V + y] = R(0);
      for (int64_t x = 0; x < K; ++x) w[i * K + x] = R(0);
      for (int64_t j = 0; j <= i; ++j) {
        const R tij = Tm[i * C + j];
        for (int64_t y = 0; y < V; ++y) u[i * V + y] += tij * vb[j * V + y];
        for (int64_t x = 0; x < K; ++x) w[i * K + x] += tij * kbe[j * K + x];
      }
      for (int64_t y = 0; y < V; ++y) u[i * V + y] = round_to(op, u[i * V + y]);
      for (int64_t x = 0; x < K; ++x) w[i * K + x] = round_to(op, w[i * K + x]);
      for (int64_t y = 0; y < V; ++y) {
        R ws = R(0);
        for (int64_t x = 0; x < K; ++x) ws += w[i * K + x] * S[x * V + y];
        vnew[i * V + y] = round_to(op, u[i * V + y] - ws);
      }
    }
    return m;
  };
  // The state and its gradient as matmul operands (`op`: in the activation dtype, as a
  // tensor-core kernel stores them between its passes); the chain between chunks stays in R.
  std::vector<R> Sr(KV), dSr(KV);
  auto operand = [&](const R* x, std::vector<R>& to) {
    for (int64_t e = 0; e < KV; ++e) to[e] = round_to(op, x[e]);
    return to.data();
  };
  for (int64_t c = 0; c < chunks; ++c) {
    const R* S = &starts[c * KV];
    R* next = &starts[(c + 1) * KV];
    const int64_t m = forward(c, operand(S, Sr));
    const R egl = std::exp(G[m - 1]);
    for (int64_t x = 0; x < K; ++x)
      for (int64_t y = 0; y < V; ++y) {
        R acc = egl * S[x * V + y];
        for (int64_t i = 0; i < m; ++i) acc += kd[i * K + x] * vnew[i * V + y];
        next[x * V + y] = acc;
      }
  }

  std::vector<R> dO(C * V), dvnew(C * V), dkd(C * K), dqe(C * K), dw(C * K), dkbe(C * K),
      dkb(C * K), dvb(C * V), dTm(C * C), dM(C * C), dLL(C * C), dG(C), tmp(C * C), dSprev(KV);
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * C;
    const R* S = operand(&starts[c * KV], Sr);
    const int64_t m = forward(c, S);
    const R egl = std::exp(G[m - 1]);
    std::fill(dG.begin(), dG.end(), R(0));
    std::fill(dLL.begin(), dLL.end(), R(0));  // dL * L: what exp(G_i - G_j) passes to dG
    for (int64_t i = 0; i < m; ++i)
      for (int64_t y = 0; y < V; ++y)
        dO[i * V + y] = round_to(op, R(d_output[tok(t0 + i) * V + y]));
    // S' = egl S + kd^T v_new.
    R dglast = R(0);
    for (int64_t e = 0; e < KV; ++e) dSprev[e] = egl * dS[e];
    const R* dSm = operand(dS, dSr);  // this chunk's products read the rounded gradient
    for (int64_t e = 0; e < KV; ++e) dglast += dSm[e] * egl * S[e];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t x = 0; x < K; ++x) {
        R acc = R(0);
        for (int64_t y = 0; y < V; ++y) acc += vnew[i * V + y] * dSm[x * V + y];
        dkd[i * K + x] = acc;
      }
      for (int64_t y = 0; y < V; ++y) {
        R acc = R(0);
        for (int64_t x = 0; x < K; ++x) acc += kd[i * K + x] * dSm[x * V + y];
        dvnew[i * V + y] = acc;
      }
    }
    // o = qe S + Aqk v_new.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t x = 0; x < K; ++x) {
        R acc = R(0);
        for (int64_t y = 0; y < V; ++y) acc += dO[i * V + y] * S[x * V + y];
        dqe[i * K + x] = acc;
      }
      for (int64_t j = 0; j <= i; ++j) {
        R dA = R(0);
        for (int64_t y = 0; y < V; ++y) dA += dO[i * V + y] * vnew[j * V + y];
        tmp[i * C + j] = dA;  // dAqk
        for (int64_t y = 0; y < V; ++y) dvnew[j * V + y] += Aqk[i * C + j] * dO[i * V + y];
      }
    }
    for (int64_t x = 0; x < K; ++x)
      for (int64_t y = 0; y < V; ++y) {
        R acc = R(0);
        for (int64_t i = 0; i < m; ++i) acc += qe[i * K + x] * dO[i * V + y];
        dSprev[x * V + y] += acc;
      }
    // v_new = u - w S: du = dv_new, dw = -dv_new S^T, dS -= w^T dv_new.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t x = 0; x < K; ++x) {
        R acc = R(0);
        for (int64_t y = 0; y < V; ++y) acc += dvnew[i * V + y] * S[x * V + y];
        dw[i * K + x] = -acc;
      }
    for (int64_t x = 0; x < K; ++x)
      for (int64_t y = 0; y < V; ++y) {
        R acc = R(0);
        for (int64_t i = 0; i < m; ++i) acc += w[i * K + x] * dvnew[i * V + y];
        dSprev[x * V + y] -= acc;
      }
    // Aqk = tril(q k^T * L): dq += (dA * L) k, dk += (dA * L)^T q, dL += dA * (q k^T).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const R dA = tmp[i * C + j], dAL = dA * Lm[i * C + j];
        for (int64_t x = 0; x < K; ++x) {
          dq[(t0 + i) * K + x] += dAL * k[(t0 + j) * K + x];
          dk[(t0 + j) * K + x] += dAL * q[(t0 + i) * K + x];
        }
        dLL[i * C + j] += dA * Aqk[i * C + j];
      }
    // kd = k exp(G_last - G), qe = q exp(G).
    for (int64_t i = 0; i < m; ++i) {
      const R eg = std::exp(G[i]), egd = std::exp(G[m - 1] - G[i]);
      R s1 = R(0), s2 = R(0);
      for (int64_t x = 0; x < K; ++x) {
        dk[(t0 + i) * K + x] += dkd[i * K + x] * egd;
        s1 += dkd[i * K + x] * kd[i * K + x];
        dq[(t0 + i) * K + x] += dqe[i * K + x] * eg;
        s2 += dqe[i * K + x] * qe[i * K + x];
      }
      dglast += s1;
      dG[i] += s2 - s1;
    }
    // u = Tm vb, w = Tm kbe: dTm = du vb^T + dw kbe^T, dvb = Tm^T du, dkbe = Tm^T dw.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        R acc = R(0);
        for (int64_t y = 0; y < V; ++y) acc += dvnew[i * V + y] * vb[j * V + y];
        for (int64_t x = 0; x < K; ++x) acc += dw[i * K + x] * kbe[j * K + x];
        dTm[i * C + j] = acc;
      }
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t y = 0; y < V; ++y) {
        R acc = R(0);
        for (int64_t i = j; i < m; ++i) acc += Tm[i * C + j] * dvnew[i * V + y];
        dvb[j * V + y] = acc;
      }
      for (int64_t x = 0; x < K; ++x) {
        R acc = R(0);
        for (int64_t i = j; i < m; ++i) acc += Tm[i * C + j] * dw[i * K + x];
        dkbe[j * K + x] = acc;
      }
    }
    // Tm = (I + M)^-1: dM = -Tm^T dTm Tm^T, strictly lower; tmp = dTm Tm^T (both factors are
    // lower triangular: the sum runs to min(i, l)).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < m; ++l) {
        R acc = R(0);
        for (int64_t j = 0; j <= std::min(i, l); ++j) acc += dTm[i * C + j] * Tm[l * C + j];
        tmp[i * C + l] = acc;
      }
    for (int64_t p = 0; p < m; ++p)
      for (int64_t l = 0; l < p; ++l) {
        R acc = R(0);
        for (int64_t i = p; i < m; ++i) acc += Tm[i * C + p] * tmp[i * C + l];
        dM[p * C + l] = -acc;
      }
    // kbe = kb exp(G): dkb = dkbe exp(G), dG += dkbe . kbe.
    for (int64_t i = 0; i < m; ++i) {
      const R eg = std::exp(G[i]);
      R s = R(0);
      for (int64_t x = 0; x < K; ++x) {
        dkb[i * K + x] = dkbe[i * K + x] * eg;
        s += dkbe[i * K + x] * kbe[i * K + x];
      }
      dG[i] += s;
    }
    // M = strictly_lower(kb k^T * L): dkb += (dM * L) k, dk += (dM * L)^T kb, dL += dM (kb . k).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const R dML = dM[i * C + j] * Lm[i * C + j];
        R d = R(0);
        for (int64_t x = 0; x < K; ++x) {
          d += kb[i * K + x] * k[(t0 + j) * K + x];
          dkb[i * K + x] += dML * k[(t0 + j) * K + x];
          dk[(t0 + j) * K + x] += dML * kb[i * K + x];
        }
        dLL[i * C + j] += dML * d;
      }
    // L_ij = exp(G_i - G_j): dG_i += dL_ij L_ij, dG_j -= dL_ij L_ij (the diagonal cancels).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const R x = dLL[i * C + j];
        dG[i] += x;
        dG[j] -= x;
      }
    dG[m - 1] += dglast;
    // kb = beta k, vb = beta v; G = cumsum(g): dg = reverse cumsum of dG.
    R rev = R(0);
    double rev_exact = 0.0;
    for (int64_t i = m - 1; i >= 0; --i) {
      const int64_t t = tok(t0 + i);
      const R b = R(a.beta[t]);
      R db = R(0);
      for (int64_t x = 0; x < K; ++x) {
        dk[(t0 + i) * K + x] += dkb[i * K + x] * b;
        db += dkb[i * K + x] * k[(t0 + i) * K + x];
      }
      for (int64_t y = 0; y < V; ++y) {
        db += dvb[i * V + y] * R(a.v[t * V + y]);
        r.dv[t * V + y] = static_cast<double>(round_to(out, R(dvb[i * V + y] * b)));
      }
      r.dbeta[t] = static_cast<double>(round_to(out, db));
      rev += dG[i];
      rev_exact += static_cast<double>(dG[i]);
      r.dg[t] = exact_cumsum ? static_cast<double>(R(rev_exact)) : static_cast<double>(rev);
    }
    std::copy(dSprev.begin(), dSprev.end(), dS);
  }
}

// The backward in compute type T; `op` rounds matmul operands (normalized q and k, do, the
// replayed states, u, err and the state gradient where they enter a product), `out` the
// gradients of activations as a kernel stores them (dq, dk, dv, dbeta; dg and dh0 stay fp32).
template <typename R>
GatedDeltaRuleGradients backward(const GatedDeltaRuleArgs& a, const double* d_output,
                                 const double* d_final_state, Rounding op, Rounding out,
                                 int64_t chunk = 0, bool exact_cumsum = false) {
  validate_backward(a, d_output);
  const int64_t B = a.batch, T = a.seq_len, H = a.num_heads, HV = a.num_value_heads;
  const int64_t K = a.key_dim, V = a.value_dim, group = HV / H, KV = K * V;
  const int64_t N = a.cu_seqlens.empty() ? B : static_cast<int64_t>(a.cu_seqlens.size()) - 1;
  const R scale = R(a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  const bool l2 = a.use_qk_l2norm;

  GatedDeltaRuleGradients r = zero_gradients(a);
  // One lane per (sequence, key head): the value heads of its group run one after another and
  // sum their gradients w.r.t. the scaled, normalized q and the normalized k (dq_hat, dk_hat, in
  // head order), which then go through the norm once. The padding tail keeps its zeros.
  std::vector<Lane> lanes;
  for (int64_t s = 0; s < N; ++s) {
    const bool packed = !a.cu_seqlens.empty();
    const int64_t begin = packed ? a.cu_seqlens[s] : 0;
    const int64_t len = packed ? a.cu_seqlens[s + 1] - begin : T;
    for (int64_t h = 0; h < H; ++h) lanes.push_back({packed ? 0 : s, begin, len, s, h});
  }

  core::parallel_for(static_cast<int64_t>(lanes.size()), 0, [&](int64_t li) {
    const Lane& L = lanes[li];
    auto qk_row = [&](int64_t t) { return ((L.row * T + L.begin + t) * H + L.head) * K; };
    // Per token of the lane: q (scaled) and k after the norm, and their gradients.
    std::vector<R> qs(L.length * K), ks(L.length * K), decay(L.length), beta(L.length);
    std::vector<R> dq_hat(L.length * K, R(0)), dk_hat(L.length * K, R(0));
    for (int64_t t = 0; t < L.length; ++t) {
      normalize(a.q + qk_row(t), K, l2, &qs[t * K]);
      for (int64_t i = 0; i < K; ++i) qs[t * K + i] = round_to(op, qs[t * K + i] * scale);
      normalize(a.k + qk_row(t), K, l2, &ks[t * K]);
      for (int64_t i = 0; i < K; ++i) ks[t * K + i] = round_to(op, ks[t * K + i]);
    }
    std::vector<R> starts, S(KV), err(V), u(V), dS(KV), states((kBlock + 1) * KV), errs(kBlock * V),
        us(kBlock * V), du(V), dp(V), dout(V);
    for (int64_t hv = L.head * group; hv < (L.head + 1) * group; ++hv) {
      auto token = [&](int64_t t) { return (L.row * T + L.begin + t) * HV + hv; };
      for (int64_t t = 0; t < L.length; ++t) {
        decay[t] = std::exp(R(a.g[token(t)]));
        beta[t] = R(a.beta[token(t)]);
      }
      auto view = [&](int64_t t) -> TokenView<R> {
        return {&qs[t * K], &ks[t * K], decay[t], beta[t]};
      };
      const int64_t state_row = (L.seq * HV + hv) * KV;
      if (chunk > 0) {
        std::vector<R> S0(KV, R(0));
        if (a.initial_state)
          std::copy(a.initial_state + state_row, a.initial_state + state_row + KV, S0.begin());
        std::fill(dS.begin(), dS.end(), R(0));
        if (d_final_state)
          std::copy(d_final_state + state_row, d_final_state + state_row + KV, dS.begin());
        if (L.length > 0)
          chunked_head(a, d_output, L.length, chunk, qs.data(), ks.data(), token, S0.data(),
                       dS.data(), dq_hat.data(), dk_hat.data(), r, op, out, exact_cumsum);
        std::copy(dS.begin(), dS.end(), r.dh0.begin() + state_row);
        continue;
      }

      // Forward: the state at the start of every block.
      const int64_t blocks = (L.length + kBlock - 1) / kBlock;
      starts.assign(static_cast<size_t>(blocks * KV), R(0));
      if (a.initial_state)
        std::copy(a.initial_state + state_row, a.initial_state + state_row + KV, S.begin());
      else
        std::fill(S.begin(), S.end(), R(0));
      for (int64_t b = 0; b < blocks; ++b) {
        std::copy(S.begin(), S.end(), starts.begin() + b * KV);
        for (int64_t t = b * kBlock; t < std::min(L.length, (b + 1) * kBlock); ++t)
          forward_step(view(t), a.v + token(t) * V, K, V, S.data(), err.data(), u.data(), op);
      }

      // Reverse: dS is the gradient w.r.t. the state after the token being undone.
      if (d_final_state)
        std::copy(d_final_state + state_row, d_final_state + state_row + KV, dS.begin());
      else
        std::fill(dS.begin(), dS.end(), R(0));
      // Per block: states[t] is the state before token t of the block (states[n]: after the
      // last), errs / us the forward's err and u of each token.
      for (int64_t b = blocks - 1; b >= 0; --b) {
        const int64_t t0 = b * kBlock, n = std::min(kBlock, L.length - t0);
        std::copy(starts.begin() + b * KV, starts.begin() + (b + 1) * KV, states.begin());
        for (int64_t t = 0; t < n; ++t) {
          std::copy(states.begin() + t * KV, states.begin() + (t + 1) * KV,
                    states.begin() + (t + 1) * KV);
          forward_step(view(t0 + t), a.v + token(t0 + t) * V, K, V, &states[(t + 1) * KV],
                       &errs[t * V], &us[t * V], op);
        }
        for (int64_t t = n - 1; t >= 0; --t) {
          const TokenView<R> tv = view(t0 + t);
          const int64_t tok = token(t0 + t);
          for (int64_t j = 0; j < V; ++j) dout[j] = round_to(op, R(d_output[tok * V + j]));
          const R* prev = &states[t * KV];         // before the decay
          const R* after = &states[(t + 1) * KV];  // after the update
          R* dqh = &dq_hat[(t0 + t) * K];
          R* dkh = &dk_hat[(t0 + t) * K];
          // o = S^T q: dq = S do, dS += q do^T.
          for (int64_t i = 0; i < K; ++i) {
            R acc = R(0);
            for (int64_t j = 0; j < V; ++j) {
              acc += round_to(op, after[i * V + j]) * dout[j];
              dS[i * V + j] += tv.q[i] * dout[j];
            }
            dqh[i] += acc;
          }
          // S = S' + k u^T: du = dS^T k, dk = dS u.
          for (int64_t j = 0; j < V; ++j) du[j] = R(0);
          for (int64_t i = 0; i < K; ++i) {
            R acc = R(0);
            for (int64_t j = 0; j < V; ++j) {
              const R ds = round_to(op, dS[i * V + j]);
              du[j] += ds * tv.k[i];
              acc += ds * round_to(op, us[t * V + j]);
            }
            dkh[i] += acc;
          }
          // u = beta (v - S'^T k): dbeta = du . err, dv = beta du, d(S'^T k) = -beta du.
          R dbeta = R(0);
          for (int64_t j = 0; j < V; ++j) {
            dbeta += du[j] * errs[t * V + j];
            r.dv[tok * V + j] = static_cast<double>(round_to(out, R(tv.beta * du[j])));
            dp[j] = -tv.beta * du[j];
          }
          r.dbeta[tok] = static_cast<double>(round_to(out, dbeta));
          // dS' = dS + k dp^T; dk += S' dp; S' = decay S_prev: dg = <dS', S'>,
          // dS_prev = decay dS'.
          R dg = R(0);
          for (int64_t i = 0; i < K; ++i) {
            R acc = R(0);
            for (int64_t j = 0; j < V; ++j) {
              const R s_dec = tv.decay * prev[i * V + j];
              const R ds = dS[i * V + j] + tv.k[i] * dp[j];
              acc += round_to(op, s_dec) * round_to(op, dp[j]);
              dg += ds * s_dec;
              dS[i * V + j] = tv.decay * ds;
            }
            dkh[i] += acc;
          }
          r.dg[tok] = static_cast<double>(dg);
        }
      }
      std::copy(dS.begin(), dS.end(), r.dh0.begin() + state_row);
    }

    // Through the scale (q) and the L2 norm: dx = r (dx_hat - x_hat (x_hat . dx_hat)).
    std::vector<R> x_hat(K);
    for (int64_t t = 0; t < L.length; ++t) {
      for (int pass = 0; pass < 2; ++pass) {
        const double* x = (pass == 0 ? a.q : a.k) + qk_row(t);
        const R* dx_hat = (pass == 0 ? dq_hat : dk_hat).data() + t * K;
        double* dx = (pass == 0 ? r.dq : r.dk).data() + qk_row(t);
        const R factor = pass == 0 ? scale : R(1);
        const R rn = normalize(x, K, l2, x_hat.data());
        R dot = R(0);
        if (l2)
          for (int64_t i = 0; i < K; ++i) dot += x_hat[i] * dx_hat[i];
        for (int64_t i = 0; i < K; ++i)
          dx[i] = static_cast<double>(round_to(out, R(factor * rn * (dx_hat[i] - x_hat[i] * dot))));
      }
    }
  });
  return r;
}

}  // namespace

GatedDeltaRuleGradients gated_delta_rule_backward(const GatedDeltaRuleArgs& a,
                                                  const double* d_output,
                                                  const double* d_final_state) {
  return backward<double>(a, d_output, d_final_state, Rounding::kNone, Rounding::kNone);
}

GatedDeltaRuleGradients gated_delta_rule_backward(const GatedDeltaRuleArgs& a,
                                                  const double* d_output,
                                                  const double* d_final_state,
                                                  const Arithmetic& how) {
  if (how.graph != Rounding::kNone)
    return gated_delta_rule_backward_autodiff(a, d_output, d_final_state, how.graph);
  if (how.form == Formulation::kChunked) {
    if (how.chunk_size < 1) throw std::invalid_argument("chunk_size must be >= 1");
  }
  const int64_t chunk = how.form == Formulation::kChunked ? how.chunk_size : 0;
  return how.fp32 ? backward<float>(a, d_output, d_final_state, how.operands, how.output, chunk,
                                    how.exact_cumsum)
                  : backward<double>(a, d_output, d_final_state, how.operands, how.output, chunk,
                                     how.exact_cumsum);
}

}  // namespace deltacheck::reference
