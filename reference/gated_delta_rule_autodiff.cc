// The gated delta rule through an activation-dtype graph, forward and reverse mode
// (reference/gated_delta_rule_autodiff.h). Per (sequence, key head): the normalized q and k, then
// each value head of the group replays the forward with the state kept at every block boundary
// and runs the reverse pass block by block, op by op as autograd records them.
#include "reference/gated_delta_rule_autodiff.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "core/parallel_for.h"

namespace deltacheck::reference {
namespace {

// Tokens between kept states (memory per lane: (T / kBlock + kBlock) K V floats).
constexpr int64_t kBlock = 64;

struct Lane {
  int64_t row, begin, length, seq, head;
};

// One op's result: computed in fp32, stored in the graph's dtype.
class Graph {
 public:
  explicit Graph(Rounding r) : r_(r) {}
  float operator()(float x) const { return round_to(r_, x); }
  float operator()(double x) const { return round_to(r_, static_cast<float>(x)); }

 private:
  Rounding r_;
};

// The L2 norm of one token's q or k row, x / sqrt(sum(x * x) + 1e-6), and what its backward needs.
struct Norm {
  std::vector<float> x, xh;  // the input (cast) and the normalized row
  float rs = 1;              // sqrt(sum(x * x) + 1e-6)
};

void normalize(const Graph& R, const double* src, int64_t K, bool l2, Norm& n) {
  n.x.resize(K);
  n.xh.resize(K);
  for (int64_t i = 0; i < K; ++i) n.x[i] = R(src[i]);
  if (!l2) {
    n.xh = n.x;
    return;
  }
  float ss = 0;  // sum(x * x): the products a tensor, their sum accumulated in fp32
  for (int64_t i = 0; i < K; ++i) ss += R(n.x[i] * n.x[i]);
  n.rs = R(std::sqrt(R(R(ss) + 1e-6f)));
  for (int64_t i = 0; i < K; ++i) n.xh[i] = R(n.x[i] / n.rs);
}

// dx of the norm from dxh: x / rs gives dx = dxh / rs and drs = sum(-dxh * (xh / rs));
// rs = sqrt(ss + eps) gives dss = drs / (2 rs); x * x (x used twice) gives 2 (dss x).
void normalize_backward(const Graph& R, const Norm& n, bool l2, const float* dxh, float* dx) {
  const int64_t K = static_cast<int64_t>(n.x.size());
  if (!l2) {
    for (int64_t i = 0; i < K; ++i) dx[i] = dxh[i];
    return;
  }
  float drs = 0;
  for (int64_t i = 0; i < K; ++i) drs += R(-dxh[i] * R(n.xh[i] / n.rs));
  const float dss = R(R(drs) / R(2.0f * n.rs));
  for (int64_t i = 0; i < K; ++i) {
    const float half = R(dss * n.x[i]);
    dx[i] = R(R(dxh[i] / n.rs) + R(half + half));
  }
}

// One token's forward from S (the state before it): Sd = exp(g) S, p = k^T Sd, e = v - p,
// u = beta e, S' = Sd + k u^T; o = q^T S' when o is not null. Sd, e, u are kept for the reverse.
struct Token {
  float dec, beta;
  const float *q, *k;  // scaled normalized q, normalized k [K]
  const double* v;     // [V]
};

void step(const Graph& R, const Token& t, int64_t K, int64_t V, const float* S, float* Sd, float* e,
          float* u, float* S1, float* o) {
  for (int64_t x = 0; x < K * V; ++x) Sd[x] = R(S[x] * t.dec);
  for (int64_t j = 0; j < V; ++j) {
    float p = 0;
    for (int64_t i = 0; i < K; ++i) p += t.k[i] * Sd[i * V + j];
    e[j] = R(R(t.v[j]) - R(p));
    u[j] = R(t.beta * e[j]);
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S1[i * V + j] = R(Sd[i * V + j] + R(t.k[i] * u[j]));
  if (!o) return;
  for (int64_t j = 0; j < V; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < K; ++i) acc += t.q[i] * S1[i * V + j];
    o[j] = R(acc);
  }
}

void check(const GatedDeltaRuleArgs& a, bool backward) {
  GatedDeltaRuleArgs checked = a;
  if (backward && !a.cu_seqlens.empty() && a.cu_seqlens.back() < a.seq_len) {
    if (a.cu_seqlens.back() < 0) throw std::invalid_argument("cu_seqlens[-1] must be >= 0");
    checked.cu_seqlens.push_back(a.seq_len);  // the tail as one more sequence, for the checks
  }
  validate(checked);
}

std::vector<Lane> lanes_of(const GatedDeltaRuleArgs& a) {
  std::vector<Lane> lanes;
  const bool packed = !a.cu_seqlens.empty();
  const int64_t N = packed ? static_cast<int64_t>(a.cu_seqlens.size()) - 1 : a.batch;
  for (int64_t s = 0; s < N; ++s) {
    const int64_t begin = packed ? a.cu_seqlens[s] : 0;
    const int64_t len = packed ? a.cu_seqlens[s + 1] - begin : a.seq_len;
    for (int64_t h = 0; h < a.num_heads; ++h) lanes.push_back({packed ? 0 : s, begin, len, s, h});
  }
  return lanes;
}

// Everything one lane's tokens share across its value heads.
struct LaneInputs {
  std::vector<Norm> q, k;
  std::vector<float> qs;  // scale * q_hat [length][K]
};

LaneInputs lane_inputs(const GatedDeltaRuleArgs& a, const Graph& R, const Lane& L) {
  const int64_t T = a.seq_len, H = a.num_heads, K = a.key_dim;
  const float scale =
      static_cast<float>(a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  LaneInputs in;
  in.q.resize(L.length);
  in.k.resize(L.length);
  in.qs.resize(L.length * K);
  for (int64_t t = 0; t < L.length; ++t) {
    const int64_t row = ((L.row * T + L.begin + t) * H + L.head) * K;
    normalize(R, a.q + row, K, a.use_qk_l2norm, in.q[t]);
    normalize(R, a.k + row, K, a.use_qk_l2norm, in.k[t]);
    for (int64_t i = 0; i < K; ++i) in.qs[t * K + i] = R(in.q[t].xh[i] * scale);
  }
  return in;
}

}  // namespace

GatedDeltaRuleGradients zero_gradients(const GatedDeltaRuleArgs& a) {
  const int64_t B = a.batch, T = a.seq_len, H = a.num_heads, HV = a.num_value_heads;
  GatedDeltaRuleGradients r;
  r.dq.assign(static_cast<size_t>(B * T * H * a.key_dim), 0.0);
  r.dk.assign(r.dq.size(), 0.0);
  r.dv.assign(static_cast<size_t>(B * T * HV * a.value_dim), 0.0);
  r.dg.assign(static_cast<size_t>(B * T * HV), 0.0);
  r.dbeta.assign(r.dg.size(), 0.0);
  r.dh0.assign(static_cast<size_t>(num_sequences(a) * HV * a.key_dim * a.value_dim), 0.0);
  return r;
}

GatedDeltaRuleResult gated_delta_rule_autodiff(const GatedDeltaRuleArgs& a, Rounding graph) {
  check(a, false);
  const Graph R(graph);
  const int64_t T = a.seq_len, HV = a.num_value_heads, K = a.key_dim, V = a.value_dim;
  const int64_t group = HV / a.num_heads, KV = K * V;
  GatedDeltaRuleResult r;
  r.output.assign(static_cast<size_t>(a.batch * T * HV * V), 0.0);
  r.final_state.assign(static_cast<size_t>(num_sequences(a) * HV * KV), 0.0);
  const std::vector<Lane> lanes = lanes_of(a);
  core::parallel_for(static_cast<int64_t>(lanes.size()), 0, [&](int64_t li) {
    const Lane& L = lanes[li];
    const LaneInputs in = lane_inputs(a, R, L);
    std::vector<float> S(KV), Sd(KV), S1(KV), e(V), u(V), o(V);
    for (int64_t hv = L.head * group; hv < (L.head + 1) * group; ++hv) {
      const int64_t state_row = (L.seq * HV + hv) * KV;
      for (int64_t x = 0; x < KV; ++x)
        S[x] = a.initial_state ? R(a.initial_state[state_row + x]) : 0;
      for (int64_t t = 0; t < L.length; ++t) {
        const int64_t tok = (L.row * T + L.begin + t) * HV + hv;
        const Token tv{R(std::exp(R(a.g[tok]))), R(a.beta[tok]), &in.qs[t * K], in.k[t].xh.data(),
                       a.v + tok * V};
        step(R, tv, K, V, S.data(), Sd.data(), e.data(), u.data(), S1.data(), o.data());
        std::swap(S, S1);
        for (int64_t j = 0; j < V; ++j) r.output[tok * V + j] = o[j];
      }
      std::copy(S.begin(), S.end(), r.final_state.begin() + state_row);
    }
  });
  return r;
}

GatedDeltaRuleGradients gated_delta_rule_backward_autodiff(const GatedDeltaRuleArgs& a,
                                                           const double* d_output,
                                                           const double* d_final_state,
                                                           Rounding graph) {
  check(a, true);
  if (!d_output && a.batch * a.seq_len > 0)
    throw std::invalid_argument("d_output (the gradient of o) is required");
  const Graph R(graph);
  const int64_t T = a.seq_len, H = a.num_heads, HV = a.num_value_heads;
  const int64_t K = a.key_dim, V = a.value_dim, group = HV / H, KV = K * V;
  GatedDeltaRuleGradients r = zero_gradients(a);
  const std::vector<Lane> lanes = lanes_of(a);
  core::parallel_for(static_cast<int64_t>(lanes.size()), 0, [&](int64_t li) {
    const Lane& L = lanes[li];
    const LaneInputs in = lane_inputs(a, R, L);
    // The gradients w.r.t. the group's shared q_hat * scale and k_hat, summed over its value
    // heads in the graph's dtype (repeat_interleave's backward adds the copies one by one).
    std::vector<float> dqs(L.length * K, 0.0f), dkh(L.length * K, 0.0f);
    std::vector<float> starts, states((kBlock + 1) * KV), Sds(kBlock * KV), es(kBlock * V),
        us(kBlock * V), dS(KV), dS1(KV), dp(V), du(V), de(V), dqt(K), dkt(K);
    std::vector<float> scratch(KV);
    for (int64_t hv = L.head * group; hv < (L.head + 1) * group; ++hv) {
      const int64_t state_row = (L.seq * HV + hv) * KV;
      auto token = [&](int64_t t) { return (L.row * T + L.begin + t) * HV + hv; };
      auto view = [&](int64_t t) {
        const int64_t tok = token(t);
        return Token{R(std::exp(R(a.g[tok]))), R(a.beta[tok]), &in.qs[t * K], in.k[t].xh.data(),
                     a.v + tok * V};
      };
      const int64_t blocks = (L.length + kBlock - 1) / kBlock;
      starts.assign(static_cast<size_t>(blocks * KV), 0.0f);
      std::vector<float> S(KV, 0.0f);
      if (a.initial_state)
        for (int64_t x = 0; x < KV; ++x) S[x] = R(a.initial_state[state_row + x]);
      for (int64_t b = 0; b < blocks; ++b) {
        std::copy(S.begin(), S.end(), starts.begin() + b * KV);
        for (int64_t t = b * kBlock; t < std::min(L.length, (b + 1) * kBlock); ++t) {
          step(R, view(t), K, V, S.data(), Sds.data(), es.data(), us.data(), scratch.data(),
               nullptr);
          std::swap(S, scratch);
        }
      }
      // dS: the gradient w.r.t. the state after the token being undone.
      for (int64_t x = 0; x < KV; ++x) dS[x] = d_final_state ? R(d_final_state[state_row + x]) : 0;
      for (int64_t b = blocks - 1; b >= 0; --b) {
        const int64_t t0 = b * kBlock, n = std::min(kBlock, L.length - t0);
        std::copy(starts.begin() + b * KV, starts.begin() + (b + 1) * KV, states.begin());
        for (int64_t t = 0; t < n; ++t)
          step(R, view(t0 + t), K, V, &states[t * KV], &Sds[t * KV], &es[t * V], &us[t * V],
               &states[(t + 1) * KV], nullptr);
        for (int64_t t = n - 1; t >= 0; --t) {
          const Token tv = view(t0 + t);
          const int64_t tok = token(t0 + t);
          const float *S0 = &states[t * KV], *S1 = &states[(t + 1) * KV], *Sd = &Sds[t * KV];
          const float *e = &es[t * V], *u = &us[t * V];
          const double* dout = d_output + tok * V;
          // o = q^T S': dq = S' do; dS' = (state gradient from later) + q do^T.
          for (int64_t i = 0; i < K; ++i) {
            float acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              const float d = R(dout[j]);
              acc += S1[i * V + j] * d;
              dS1[i * V + j] = R(dS[i * V + j] + R(tv.q[i] * d));
            }
            dqt[i] = R(acc);
          }
          // S' = Sd + k u^T: dk = dS' u, du = dS'^T k (dSd gets dS' as it is).
          for (int64_t j = 0; j < V; ++j) du[j] = 0;
          for (int64_t i = 0; i < K; ++i) {
            float acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              acc += dS1[i * V + j] * u[j];
              du[j] += dS1[i * V + j] * tv.k[i];
            }
            dkt[i] = R(acc);
          }
          // u = beta e: de = beta du, dbeta = sum(du * e); e = v - p: dv = de, dp = -de.
          float dbeta = 0;
          for (int64_t j = 0; j < V; ++j) {
            du[j] = R(du[j]);
            de[j] = R(tv.beta * du[j]);
            dbeta += R(du[j] * e[j]);
            dp[j] = -de[j];
            r.dv[tok * V + j] = de[j];
          }
          r.dbeta[tok] = R(dbeta);
          // p = k^T Sd: dk += Sd dp, dSd = dS' + k dp^T; Sd = S exp(g): dS = dSd exp(g),
          // d exp(g) = sum(dSd * S), dg = d exp(g) * exp(g).
          float ddec = 0;
          for (int64_t i = 0; i < K; ++i) {
            float acc = 0;
            for (int64_t j = 0; j < V; ++j) {
              acc += Sd[i * V + j] * dp[j];
              const float dSd = R(dS1[i * V + j] + R(tv.k[i] * dp[j]));
              ddec += R(dSd * S0[i * V + j]);
              dS[i * V + j] = R(dSd * tv.dec);
            }
            dkt[i] = R(dkt[i] + R(acc));
          }
          r.dg[tok] = R(R(ddec) * tv.dec);
          float* dq = &dqs[(t0 + t) * K];
          float* dk = &dkh[(t0 + t) * K];
          const bool first = hv == L.head * group;
          for (int64_t i = 0; i < K; ++i) {
            dq[i] = first ? dqt[i] : R(dq[i] + dqt[i]);
            dk[i] = first ? dkt[i] : R(dk[i] + dkt[i]);
          }
        }
      }
      std::copy(dS.begin(), dS.end(), r.dh0.begin() + state_row);
    }
    // Through the scale (q) and the L2 norm.
    const float scale = static_cast<float>(
        a.scale.has_value() ? *a.scale : 1.0 / std::sqrt(static_cast<double>(K)));
    std::vector<float> dxh(K), dx(K);
    for (int64_t t = 0; t < L.length; ++t) {
      const int64_t row = ((L.row * T + L.begin + t) * H + L.head) * K;
      for (int64_t i = 0; i < K; ++i) dxh[i] = R(dqs[t * K + i] * scale);
      normalize_backward(R, in.q[t], a.use_qk_l2norm, dxh.data(), dx.data());
      for (int64_t i = 0; i < K; ++i) r.dq[row + i] = dx[i];
      normalize_backward(R, in.k[t], a.use_qk_l2norm, &dkh[t * K], dx.data());
      for (int64_t i = 0; i < K; ++i) r.dk[row + i] = dx[i];
    }
  });
  return r;
}

}  // namespace deltacheck::reference
