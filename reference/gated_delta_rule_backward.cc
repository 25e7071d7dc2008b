// FP64 backward of the gated delta rule: per (sequence, key head), each value head of the group
// replays the forward with the state kept at every block boundary, then runs the reverse
// recurrence block by block; the group's q / k gradients go through the norm at the end.
#include "reference/gated_delta_rule_backward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/parallel_for.h"

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
  if (!d_output) throw std::invalid_argument("d_output (the gradient of o) is required");
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

// The backward in compute type T; `op` rounds matmul operands (normalized q and k, do, the
// replayed states, u, err and the state gradient where they enter a product), `out` the
// gradients of activations as a kernel stores them (dq, dk, dv, dbeta; dg and dh0 stay fp32).
template <typename R>
GatedDeltaRuleGradients backward(const GatedDeltaRuleArgs& a, const double* d_output,
                                 const double* d_final_state, Rounding op, Rounding out) {
  validate_backward(a, d_output);
  const int64_t B = a.batch, T = a.seq_len, H = a.num_heads, HV = a.num_value_heads;
  const int64_t K = a.key_dim, V = a.value_dim, group = HV / H, KV = K * V;
  const int64_t N = a.cu_seqlens.empty() ? B : static_cast<int64_t>(a.cu_seqlens.size()) - 1;
  const R scale = R(a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  const bool l2 = a.use_qk_l2norm;

  GatedDeltaRuleGradients r;
  r.dq.assign(static_cast<size_t>(B * T * H * K), 0.0);
  r.dk.assign(r.dq.size(), 0.0);
  r.dv.assign(static_cast<size_t>(B * T * HV * V), 0.0);
  r.dg.assign(static_cast<size_t>(B * T * HV), 0.0);
  r.dbeta.assign(r.dg.size(), 0.0);
  r.dh0.assign(static_cast<size_t>(N * HV * KV), 0.0);
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
  if (how.form != Formulation::kRecurrent)
    throw std::invalid_argument("the backward baselines are token recurrences only");
  return how.fp32 ? backward<float>(a, d_output, d_final_state, how.operands, how.output)
                  : backward<double>(a, d_output, d_final_state, how.operands, how.output);
}

}  // namespace deltacheck::reference
