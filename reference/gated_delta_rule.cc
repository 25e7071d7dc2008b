// FP64 gated delta rule: the plain recurrence (the oracle) and the chunked WY form (its
// cross-check).
#include "reference/gated_delta_rule.h"

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

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

// Runs fn(i) for i in [0, n) on all hardware threads. The oracle is plain loops, but it is run on
// every case of every suite, so independent (sequence, head) lanes are spread over the cores.
template <typename Fn>
void for_each_lane(int64_t n, Fn&& fn) {
  unsigned hw = std::thread::hardware_concurrency();
  int64_t workers = std::min<int64_t>(n, hw == 0 ? 1 : static_cast<int64_t>(hw));
  if (workers <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> threads;
  for (int64_t w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
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

// Copies q or k of one token and head, applying the optional L2 norm and a factor.
void load_qk(const GatedDeltaRuleArgs& a, const double* src, int64_t row, int64_t t, int64_t head,
             double factor, double* dst) {
  const int64_t K = a.key_dim;
  const double* x = src + ((row * a.seq_len + t) * a.num_heads + head) * K;
  double inv = 1.0;
  if (a.use_qk_l2norm) {
    double ss = 0.0;
    for (int64_t i = 0; i < K; ++i) ss += x[i] * x[i];
    inv = 1.0 / std::sqrt(ss + 1e-6);
  }
  for (int64_t i = 0; i < K; ++i) dst[i] = x[i] * inv * factor;
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
  if (!a.q || !a.k || !a.v || !a.g || !a.beta) fail("q, k, v, g and beta are required");
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

GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleArgs& a) {
  validate(a);
  const int64_t K = a.key_dim, V = a.value_dim, H = a.num_heads, HV = a.num_value_heads;
  const int64_t group = HV / H;
  const double scale = resolved_scale(a);
  GatedDeltaRuleResult r;
  r.output.assign(static_cast<size_t>(a.batch * a.seq_len * HV * V), 0.0);
  r.final_state.assign(static_cast<size_t>(num_sequences(a) * HV * K * V), 0.0);
  const std::vector<Lane> lanes = make_lanes(a);

  for_each_lane(static_cast<int64_t>(lanes.size()), [&](int64_t li) {
    const Lane& L = lanes[li];
    const int64_t qk_head = L.value_head / group;
    double* S = r.final_state.data() + (L.seq * HV + L.value_head) * K * V;  // [K][V]
    if (a.initial_state) {
      const double* s0 = a.initial_state + (L.seq * HV + L.value_head) * K * V;
      for (int64_t i = 0; i < K * V; ++i) S[i] = s0[i];
    }
    std::vector<double> q(K), k(K), u(V);
    for (int64_t t = L.token_begin; t < L.token_begin + L.length; ++t) {
      const int64_t tok = (L.batch_row * a.seq_len + t) * HV + L.value_head;
      load_qk(a, a.q, L.batch_row, t, qk_head, scale, q.data());
      load_qk(a, a.k, L.batch_row, t, qk_head, 1.0, k.data());
      const double decay = std::exp(a.g[tok]);
      const double beta = a.beta[tok];
      const double* v = a.v + tok * V;
      // The four steps of the rule in two passes over the rows of S (each element still sees
      // the steps in order; the sums over i run in the same order as four separate passes).
      // S <- exp(g) S  and  u = S^T k
      for (int64_t j = 0; j < V; ++j) u[j] = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        double* Si = S + i * V;
        const double ki = k[i];
        for (int64_t j = 0; j < V; ++j) {
          Si[j] *= decay;
          u[j] += Si[j] * ki;
        }
      }
      // u = beta (v - S^T k)
      for (int64_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
      // S <- S + k u^T  and  o = S^T (scale q)
      double* o = r.output.data() + tok * V;
      for (int64_t i = 0; i < K; ++i) {
        double* Si = S + i * V;
        const double ki = k[i], qi = q[i];
        for (int64_t j = 0; j < V; ++j) {
          Si[j] += ki * u[j];
          o[j] += Si[j] * qi;
        }
      }
    }
  });
  return r;
}

// Chunked form. Within a chunk starting from state S0, with G_t the cumulative log decay from the
// chunk start (inclusive) and D_tj = exp(G_t - G_j) for j <= t:
//   (I + A) U = beta * (V - exp(G) * (K S0)),   A_tj = beta_t D_tj (k_t . k_j) for j < t
//   O = exp(G) * (Q S0) + (D .* Q K^T)_{j<=t} U
//   S_end = exp(G_last) S0 + sum_j D_last,j k_j u_j^T
// The unit lower-triangular system is solved by explicitly forming T = (I + A)^-1 (the "UT
// transform") and multiplying, which is a different order of operations from the recurrence.
GatedDeltaRuleResult gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, int64_t chunk_size) {
  validate(a);
  if (chunk_size < 1) throw std::invalid_argument("chunk_size must be >= 1");
  const int64_t K = a.key_dim, V = a.value_dim, H = a.num_heads, HV = a.num_value_heads;
  const int64_t group = HV / H;
  const double scale = resolved_scale(a);
  GatedDeltaRuleResult r;
  r.output.assign(static_cast<size_t>(a.batch * a.seq_len * HV * V), 0.0);
  r.final_state.assign(static_cast<size_t>(num_sequences(a) * HV * K * V), 0.0);
  const std::vector<Lane> lanes = make_lanes(a);

  for_each_lane(static_cast<int64_t>(lanes.size()), [&](int64_t li) {
    const Lane& L = lanes[li];
    const int64_t qk_head = L.value_head / group;
    const int64_t C = chunk_size;
    std::vector<double> S(K * V, 0.0);
    if (a.initial_state) {
      const double* s0 = a.initial_state + (L.seq * HV + L.value_head) * K * V;
      S.assign(s0, s0 + K * V);
    }
    std::vector<double> Q(C * K), Kc(C * K), Vc(C * V), G(C), B(C), Am(C * C), Tm(C * C),
        Rhs(C * V), U(C * V), Snew(K * V);
    for (int64_t c0 = 0; c0 < L.length; c0 += C) {
      const int64_t n = std::min(C, L.length - c0);
      double cum = 0.0;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = L.token_begin + c0 + t;
        const int64_t tok = (L.batch_row * a.seq_len + pos) * HV + L.value_head;
        load_qk(a, a.q, L.batch_row, pos, qk_head, scale, &Q[t * K]);
        load_qk(a, a.k, L.batch_row, pos, qk_head, 1.0, &Kc[t * K]);
        for (int64_t j = 0; j < V; ++j) Vc[t * V + j] = a.v[tok * V + j];
        cum += a.g[tok];
        G[t] = cum;
        B[t] = a.beta[tok];
      }
      auto dot = [&](const double* x, const double* y) {
        double s = 0.0;
        for (int64_t i = 0; i < K; ++i) s += x[i] * y[i];
        return s;
      };
      // A_tj = beta_t exp(G_t - G_j) (k_t . k_j), j < t; then T = (I + A)^-1 by forward
      // substitution on the identity, column by column.
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < t; ++j)
          Am[t * n + j] = B[t] * std::exp(G[t] - G[j]) * dot(&Kc[t * K], &Kc[j * K]);
      for (int64_t i = 0; i < n * n; ++i) Tm[i] = 0.0;
      for (int64_t col = 0; col < n; ++col) {
        Tm[col * n + col] = 1.0;
        for (int64_t t = col + 1; t < n; ++t) {
          double s = 0.0;
          for (int64_t j = col; j < t; ++j) s += Am[t * n + j] * Tm[j * n + col];
          Tm[t * n + col] = -s;
        }
      }
      // Rhs = beta * (V - exp(G) * K S0)
      for (int64_t t = 0; t < n; ++t) {
        const double eg = std::exp(G[t]);
        for (int64_t j = 0; j < V; ++j) {
          double ks = 0.0;
          for (int64_t i = 0; i < K; ++i) ks += Kc[t * K + i] * S[i * V + j];
          Rhs[t * V + j] = B[t] * (Vc[t * V + j] - eg * ks);
        }
      }
      // U = T Rhs
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < V; ++j) {
          double s = 0.0;
          for (int64_t m = 0; m <= t; ++m) s += Tm[t * n + m] * Rhs[m * V + j];
          U[t * V + j] = s;
        }
      // O = exp(G) Q S0 + (D .* Q K^T) U
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = L.token_begin + c0 + t;
        const int64_t tok = (L.batch_row * a.seq_len + pos) * HV + L.value_head;
        const double eg = std::exp(G[t]);
        double* o = r.output.data() + tok * V;
        for (int64_t j = 0; j < V; ++j) {
          double qs = 0.0;
          for (int64_t i = 0; i < K; ++i) qs += Q[t * K + i] * S[i * V + j];
          o[j] = eg * qs;
        }
        for (int64_t m = 0; m <= t; ++m) {
          const double w = std::exp(G[t] - G[m]) * dot(&Q[t * K], &Kc[m * K]);
          for (int64_t j = 0; j < V; ++j) o[j] += w * U[m * V + j];
        }
      }
      // S_end = exp(G_last) S0 + sum_m exp(G_last - G_m) k_m u_m^T
      const double glast = G[n - 1];
      for (int64_t i = 0; i < K * V; ++i) Snew[i] = std::exp(glast) * S[i];
      for (int64_t m = 0; m < n; ++m) {
        const double w = std::exp(glast - G[m]);
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) Snew[i * V + j] += w * Kc[m * K + i] * U[m * V + j];
      }
      S.swap(Snew);
    }
    double* out = r.final_state.data() + (L.seq * HV + L.value_head) * K * V;
    for (int64_t i = 0; i < K * V; ++i) out[i] = S[i];
  });
  return r;
}

}  // namespace deltacheck::reference
