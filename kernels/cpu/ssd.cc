// The CPU Mamba2 SSD forward. Per (sequence, head) lane, the state is kept transposed, S^T: [N, P]
// fp32, and each chunk of Q tokens (never across a sequence boundary) is four small products:
//   CB  = C B^T                                    [Q, Q]
//   Y   = (CB * exp(cs_i - cs_j) dt_j, j <= i) X   [Q, P]   (intra-chunk, segment sums)
//   Y  += (exp(cs) C) S^T                          [Q, P]   (inter-chunk, from the carried state)
//   S^T = exp(cs_last) S^T + (B exp(cs_last - cs) dt)^T X   (the state after the chunk)
// with cs the chunk's running sum of dt A; then y = (Y + D x) silu(z).
#include "kernels/cpu/ssd.h"

#include <cmath>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/chunk_gemm.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

struct Lane {
  int64_t row, begin, length, seq, head;
};

std::vector<Lane> lanes_of(const SsdParams& p) {
  std::vector<Lane> lanes;
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t begin = p.cu_seqlens ? p.cu_seqlens[s] : 0;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[s + 1] - begin : p.seq_len;
    for (int64_t h = 0; h < p.num_heads; ++h)
      lanes.push_back({p.cu_seqlens ? 0 : s, begin, len, s, h});
  }
  return lanes;
}

// y = (acc + D x) silu(z) for the P elements of one token and head, stored at element `at`.
void finish_row(const SsdParams& p, int64_t h, int64_t at, const float* x, float* acc,
                std::vector<float>& zrow) {
  const int64_t P = p.head_dim;
  if (p.D)
    for (int64_t i = 0; i < P; ++i) acc[i] += p.D[h] * x[i];
  if (p.z) {
    load_row(p.z, p.dtype, at, P, zrow.data());
    for (int64_t i = 0; i < P; ++i) acc[i] *= zrow[i] / (1.0f + std::exp(-zrow[i]));
  }
  store_row(p.y, p.dtype, at, P, acc);
}

// The lane's state in S^T layout [N, P] from the [P, N] buffer (zeros without one), and back.
void load_state(const SsdParams& p, const Lane& L, float* st) {
  const int64_t P = p.head_dim, N = p.state_dim;
  const float* s0 =
      p.initial_state ? p.initial_state + (L.seq * p.num_heads + L.head) * P * N : nullptr;
  for (int64_t i = 0; i < P; ++i)
    for (int64_t n = 0; n < N; ++n) st[n * P + i] = s0 ? s0[i * N + n] : 0.0f;
}
void store_state(const SsdParams& p, const Lane& L, const float* st) {
  if (!p.final_state) return;
  const int64_t P = p.head_dim, N = p.state_dim;
  float* fs = p.final_state + (L.seq * p.num_heads + L.head) * P * N;
  for (int64_t i = 0; i < P; ++i)
    for (int64_t n = 0; n < N; ++n) fs[i * N + n] = st[n * P + i];
}

void chunked_lane(const SsdParams& p, const Lane& L) {
  using chunk_gemm::gemm;
  const int64_t H = p.num_heads, P = p.head_dim, G = p.num_groups, N = p.state_dim;
  const int64_t Qmax = p.chunk_size, g = L.head / (H / G);
  std::vector<float> st(N * P), x(Qmax * P), b(Qmax * N), bt(N * Qmax), c(Qmax * N),
      cb(Qmax * Qmax), y(Qmax * P), dt(Qmax), cs(Qmax), zrow(P);
  load_state(p, L, st.data());
  const float A = p.A[L.head];
  for (int64_t c0 = 0; c0 < L.length; c0 += Qmax) {
    const int64_t Q = std::min(Qmax, L.length - c0);
    const int64_t tok0 = L.row * p.seq_len + L.begin + c0;
    float run = 0.0f;
    std::vector<float> raw(Q);
    for (int64_t i = 0; i < Q; ++i) {
      const int64_t tok = tok0 + i;
      load_row(p.dt, p.dtype, tok * H + L.head, 1, &raw[i]);
      dt[i] = ssd_dt(p, raw[i], L.head);
      run += dt[i] * A;
      cs[i] = run;
      load_row(p.x, p.dtype, (tok * H + L.head) * P, P, x.data() + i * P);
      load_row(p.B, p.dtype, (tok * G + g) * N, N, b.data() + i * N);
      load_row(p.C, p.dtype, (tok * G + g) * N, N, c.data() + i * N);
    }
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t n = 0; n < N; ++n) bt[n * Q + i] = b[i * N + n];
    gemm(Q, Q, N, c.data(), N, bt.data(), Q, cb.data(), Q, chunk_gemm::kOverwrite);
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t j = 0; j < Q; ++j)
        cb[i * Q + j] = j <= i ? cb[i * Q + j] * std::exp(cs[i] - cs[j]) * dt[j] : 0.0f;
    gemm(Q, P, Q, cb.data(), Q, x.data(), P, y.data(), P, chunk_gemm::kOverwrite);
    for (int64_t i = 0; i < Q; ++i) {
      const float e = std::exp(cs[i]);
      for (int64_t n = 0; n < N; ++n) c[i * N + n] *= e;
    }
    gemm(Q, P, N, c.data(), N, st.data(), P, y.data(), P, chunk_gemm::kAccumulate);
    const float last = cs[Q - 1];
    for (int64_t j = 0; j < Q; ++j) raw[j] = std::exp(last - cs[j]) * dt[j];  // B's scale
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < Q; ++j) bt[n * Q + j] *= raw[j];
    gemm(N, P, Q, bt.data(), Q, x.data(), P, st.data(), P, {true, std::exp(last)});
    for (int64_t i = 0; i < Q; ++i)
      finish_row(p, L.head, ((tok0 + i) * H + L.head) * P, x.data() + i * P, y.data() + i * P,
                 zrow);
  }
  store_state(p, L, st.data());
}

void update_lane(const SsdParams& p, const Lane& L) {
  const int64_t H = p.num_heads, P = p.head_dim, G = p.num_groups, N = p.state_dim;
  const int64_t g = L.head / (H / G);
  std::vector<float> st(N * P), x(P), b(N), c(N), y(P), zrow(P);
  load_state(p, L, st.data());
  for (int64_t t = 0; t < L.length; ++t) {
    const int64_t tok = L.row * p.seq_len + L.begin + t;
    float raw = 0.0f;
    load_row(p.dt, p.dtype, tok * H + L.head, 1, &raw);
    const float dt = ssd_dt(p, raw, L.head), decay = std::exp(dt * p.A[L.head]);
    load_row(p.x, p.dtype, (tok * H + L.head) * P, P, x.data());
    load_row(p.B, p.dtype, (tok * G + g) * N, N, b.data());
    load_row(p.C, p.dtype, (tok * G + g) * N, N, c.data());
    for (int64_t i = 0; i < P; ++i) y[i] = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      float* sn = st.data() + n * P;
      const float bn = dt * b[n], cn = c[n];
      for (int64_t i = 0; i < P; ++i) {
        sn[i] = decay * sn[i] + bn * x[i];
        y[i] += sn[i] * cn;
      }
    }
    finish_row(p, L.head, (tok * H + L.head) * P, x.data(), y.data(), zrow);
  }
  store_state(p, L, st.data());
}

template <typename LaneFn>
Status run_lanes(const SsdParams& p, LaneFn fn) {
  if (Status st = check_ssd_params(p); !st.ok()) return st;
  const std::vector<Lane> lanes = lanes_of(p);
  core::parallel_for(static_cast<int64_t>(lanes.size()), p.num_threads,
                     [&](int64_t i) { fn(p, lanes[i]); });
  return Status::Ok();
}

}  // namespace

float ssd_dt(const SsdParams& p, float raw, int64_t head) {
  float v = raw + (p.dt_bias ? p.dt_bias[head] : 0.0f);
  if (p.dt_softplus) v = v <= 20.0f ? std::log1p(std::exp(v)) : v;
  return std::fmin(std::fmax(v, p.dt_min), p.dt_max);
}

Status check_ssd_params(const SsdParams& p) {
  if (p.batch < 1 || p.seq_len < 0) return Status::InvalidArgument("batch must be >= 1, T >= 0");
  if (Status st = check_dtype(p.dtype, "x, dt, B, C, z and y"); !st.ok()) return st;
  if (p.num_heads < 1 || p.head_dim < 1 || p.num_groups < 1 || p.state_dim < 1)
    return Status::InvalidArgument("H, P, G and N must be >= 1");
  if (p.num_heads % p.num_groups != 0) return Status::InvalidArgument("H % G != 0");
  if (p.batch * p.seq_len > 0 && (!p.x || !p.dt || !p.B || !p.C || !p.A || !p.y))
    return Status::InvalidArgument("x, dt, A, B, C and y are required");
  if (p.chunk_size < 1) return Status::InvalidArgument("chunk_size must be >= 1");
  if (!(p.dt_min <= p.dt_max)) return Status::InvalidArgument("dt_limit needs dt_min <= dt_max");
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens requires batch == 1");
    return check_cu_seqlens(p.cu_seqlens, p.num_seqs, p.seq_len);
  }
  return Status::Ok();
}

Status chunked_ssd(const SsdParams& p) { return run_lanes(p, chunked_lane); }

Status ssd_state_update(const SsdParams& p) { return run_lanes(p, update_lane); }

}  // namespace deltacheck::kernels::cpu
