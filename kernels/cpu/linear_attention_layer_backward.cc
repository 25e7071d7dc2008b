// CPU backward of the linear-attention layer: the forward recomputed on the live tokens through
// the CPU forward kernels, then the parts' backwards chained in reverse through workspaces in the
// activation dtype.
#include "kernels/cpu/linear_attention_layer_backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/causal_conv1d_backward.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_delta_rule_backward.h"
#include "kernels/cpu/gates.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kElementsPerTask = 16384;  // below this a thread costs more than it saves

Status check(const LinearAttentionLayerBackwardParams& p) {
  const LinearAttentionLayerParams& f = p.forward;
  if (f.decode || f.state_slots)
    return Status::Unsupported("the layer backward takes no decode step and no state slots");
  if (f.seq_len < 0) return Status::InvalidArgument("seq_len must be >= 0");
  if (Status st = check_dtype(f.dtype, "activations"); !st.ok()) return st;
  if (f.num_heads < 1 || f.num_value_heads < 1 || f.key_dim < 1 || f.value_dim < 1)
    return Status::InvalidArgument("head counts and head dims must be >= 1");
  if (f.num_value_heads % f.num_heads != 0) return Status::InvalidArgument("HV % H != 0");
  if (f.conv_width < 2 || f.conv_width > 4)
    return Status::Unsupported("conv width " + std::to_string(f.conv_width) + " (supported: 2..4)");
  if (f.chunk_size < 1) return Status::InvalidArgument("chunk_size must be >= 1");
  if (!(f.norm_eps >= 0.0f)) return Status::InvalidArgument("norm_eps must be >= 0");
  if (!f.qkv || !f.z || !f.a || !f.b || !f.conv_weight || !f.A_log || !f.dt_bias || !f.norm_weight)
    return Status::InvalidArgument(
        "qkv, z, a, b, conv_weight, A_log, dt_bias and norm_weight are required");
  if (!p.d_output || !p.dqkv || !p.dz || !p.da || !p.db || !p.dconv_weight || !p.dA_log ||
      !p.ddt_bias || !p.dnorm_weight)
    return Status::InvalidArgument(
        "d_output, dqkv, dz, da, db, dconv_weight, dA_log, ddt_bias and dnorm_weight are required");
  if (f.cu_seqlens) {
    if (f.num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
    const int64_t end = f.cu_seqlens[f.num_seqs];
    if (end < 0 || end > f.seq_len)
      return Status::InvalidArgument("cu_seqlens[-1] must be in [0, T]");
    if (Status st = check_cu_seqlens(f.cu_seqlens, f.num_seqs, end); !st.ok()) return st;
  }
  return Status::Ok();
}

// Workspace of `elements` values of `bytes` each; never empty, so no step sees a null buffer.
std::vector<unsigned char> workspace(int64_t elements, int64_t bytes) {
  return std::vector<unsigned char>(static_cast<size_t>(std::max<int64_t>(elements, 1) * bytes));
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Sums per-task partial sums ([tasks, n]) into out[n] in task order.
void reduce_partials(const std::vector<float>& partial, int64_t tasks, int64_t n, float* out) {
  std::fill(out, out + n, 0.0f);
  for (int64_t t = 0; t < tasks; ++t)
    for (int64_t i = 0; i < n; ++i) out[i] += partial[t * n + i];
}

// Gated RMS norm backward over `rows` [V] vectors: dx (the rule's d_output) and dz in the
// activation dtype, dweight summed in fp32.
void norm_backward(const LinearAttentionLayerBackwardParams& p, int64_t rows, const void* core,
                   void* dcore) {
  const LinearAttentionLayerParams& f = p.forward;
  const int64_t V = f.value_dim;
  const int64_t rows_per_task = std::max<int64_t>(1, kElementsPerTask / V);
  const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(tasks, 1) * V), 0.0f);
  core::parallel_for(tasks, f.num_threads, [&](int64_t task) {
    thread_local std::vector<float> s;
    s.resize(static_cast<size_t>(5 * V));
    float *x = s.data(), *z = x + V, *dy = z + V, *dx = dy + V, *dz = dx + V;
    float* dw = partial.data() + task * V;
    const int64_t r1 = std::min(rows, (task + 1) * rows_per_task);
    for (int64_t r = task * rows_per_task; r < r1; ++r) {
      const int64_t base = r * V;
      load_row(core, f.dtype, base, V, x);
      load_row(f.z, f.dtype, base, V, z);
      load_row(p.d_output, f.dtype, base, V, dy);
      float ss = 0.0f;
      for (int64_t i = 0; i < V; ++i) ss += x[i] * x[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(V) + f.norm_eps);
      float dot = 0.0f;  // x . gy, gy = dy w silu(z)
      for (int64_t i = 0; i < V; ++i) {
        const float sz = sigmoid(z[i]), silu = z[i] * sz;
        const float gy = dy[i] * f.norm_weight[i] * silu;
        dot += x[i] * gy;
        dw[i] += dy[i] * inv * x[i] * silu;
        dz[i] = dy[i] * f.norm_weight[i] * inv * x[i] * sz * (1.0f + z[i] * (1.0f - sz));
        dx[i] = gy;
      }
      const float c = inv * inv * inv * dot / static_cast<float>(V);
      for (int64_t i = 0; i < V; ++i) dx[i] = inv * dx[i] - x[i] * c;
      store_row(dcore, f.dtype, base, V, dx);
      store_row(p.dz, f.dtype, base, V, dz);
    }
  });
  reduce_partials(partial, tasks, V, p.dnorm_weight);
}

// Gates backward over `tokens` tokens: da, db in the activation dtype, dA_log and ddt_bias summed
// in fp32 (g is the forward's fp32 gate).
void gates_backward(const LinearAttentionLayerBackwardParams& p, int64_t tokens, const float* g,
                    const float* dg, const void* dbeta) {
  const LinearAttentionLayerParams& f = p.forward;
  const int64_t HV = f.num_value_heads;
  const int64_t per_task = std::max<int64_t>(1, kElementsPerTask / HV);
  const int64_t tasks = (tokens + per_task - 1) / per_task;
  std::vector<float> rate(static_cast<size_t>(HV));
  for (int64_t h = 0; h < HV; ++h) rate[h] = std::exp(f.A_log[h]);
  std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(tasks, 1) * 2 * HV), 0.0f);
  core::parallel_for(tasks, f.num_threads, [&](int64_t task) {
    float* dalog = partial.data() + task * 2 * HV;
    float* ddt = dalog + HV;
    const int64_t t1 = std::min(tokens, (task + 1) * per_task);
    for (int64_t t = task * per_task; t < t1; ++t)
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t i = t * HV + h;
        const float x = load_as_float(f.a, f.dtype, i) + f.dt_bias[h];
        const float da = -dg[i] * rate[h] * sigmoid(x);
        ddt[h] += da;
        dalog[h] += dg[i] * g[i];
        store_from_float(p.da, f.dtype, i, da);
        const float b = load_as_float(f.b, f.dtype, i);
        store_from_float(p.db, f.dtype, i,
                         load_as_float(dbeta, f.dtype, i) * sigmoid(b) * sigmoid(-b));
      }
  });
  std::vector<float> sums(static_cast<size_t>(2 * HV));
  reduce_partials(partial, tasks, 2 * HV, sums.data());
  std::copy(sums.begin(), sums.begin() + HV, p.dA_log);
  std::copy(sums.begin() + HV, sums.end(), p.ddt_bias);
}

}  // namespace

Status linear_attention_layer_backward(const LinearAttentionLayerBackwardParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  const LinearAttentionLayerParams& f = p.forward;
  const int64_t T = f.seq_len, H = f.num_heads, HV = f.num_value_heads;
  const int64_t K = f.key_dim, V = f.value_dim, D = qkv_channels(f), W = f.conv_width;
  const int64_t N = f.cu_seqlens ? f.num_seqs : 1;
  const int64_t TL = f.cu_seqlens ? f.cu_seqlens[N] : T;  // the live tokens
  const int64_t es = dtype_size(f.dtype);
  std::vector<unsigned char> dmixed = workspace(TL * D, es);

  if (TL > 0) {
    // Forward, recomputed: conv, split, gates, rule.
    std::vector<unsigned char> mixed = workspace(TL * D, es), q = workspace(TL * H * K, es),
                               k = workspace(TL * H * K, es), v = workspace(TL * HV * V, es),
                               beta = workspace(TL * HV, es), core = workspace(TL * HV * V, es);
    std::vector<float> g(static_cast<size_t>(TL * HV));
    CausalConv1dParams conv;
    conv.seq_len = TL;
    conv.channels = D;
    conv.width = W;
    conv.dtype = f.dtype;
    conv.x = f.qkv;
    conv.out = mixed.data();
    conv.weight = f.conv_weight;
    conv.bias = f.conv_bias;
    conv.cu_seqlens = f.cu_seqlens;
    conv.num_seqs = f.num_seqs;
    conv.initial_state = f.initial_conv_state;
    conv.num_threads = f.num_threads;
    if (Status st = causal_conv1d(conv); !st.ok()) return st;
    const int64_t qk_bytes = H * K * es, v_bytes = HV * V * es;
    for (int64_t t = 0; t < TL; ++t) {
      const unsigned char* row = mixed.data() + t * D * es;
      std::memcpy(q.data() + t * qk_bytes, row, static_cast<size_t>(qk_bytes));
      std::memcpy(k.data() + t * qk_bytes, row + qk_bytes, static_cast<size_t>(qk_bytes));
      std::memcpy(v.data() + t * v_bytes, row + 2 * qk_bytes, static_cast<size_t>(v_bytes));
    }
    GatesParams gp;
    gp.num_tokens = TL;
    gp.num_value_heads = HV;
    gp.dtype = f.dtype;
    gp.a = f.a;
    gp.b = f.b;
    gp.A_log = f.A_log;
    gp.dt_bias = f.dt_bias;
    gp.g = g.data();
    gp.beta = beta.data();
    gp.num_threads = f.num_threads;
    if (Status st = gates(gp); !st.ok()) return st;
    GatedDeltaRuleParams rule;
    rule.seq_len = TL;
    rule.num_heads = H;
    rule.num_value_heads = HV;
    rule.key_dim = K;
    rule.value_dim = V;
    rule.dtype = f.dtype;
    rule.q = q.data(), rule.k = k.data(), rule.v = v.data(), rule.g = g.data();
    rule.beta = beta.data();
    rule.o = core.data();
    rule.cu_seqlens = f.cu_seqlens;
    rule.num_seqs = f.num_seqs;
    rule.initial_state = f.initial_state;
    rule.scale = f.scale;
    rule.use_qk_l2norm = true;
    rule.chunk_size = f.chunk_size;
    rule.num_threads = f.num_threads;
    if (Status st = chunked_gated_delta_rule(rule); !st.ok()) return st;

    // Backward, last part first: norm, rule, gates; the conv below.
    std::vector<unsigned char> dcore = workspace(TL * HV * V, es);
    norm_backward(p, TL * HV, core.data(), dcore.data());
    std::vector<unsigned char> dq = workspace(TL * H * K, es), dk = workspace(TL * H * K, es),
                               dv = workspace(TL * HV * V, es), dbeta = workspace(TL * HV, es);
    std::vector<float> dg(static_cast<size_t>(TL * HV));
    GatedDeltaRuleBackwardParams rb;
    rb.forward = rule;
    rb.forward.o = nullptr;
    rb.d_output = dcore.data();
    rb.d_final_state = p.d_final_state;
    rb.dq = dq.data(), rb.dk = dk.data(), rb.dv = dv.data(), rb.dg = dg.data();
    rb.dbeta = dbeta.data();
    rb.dh0 = p.dinitial_state;
    if (Status st = gated_delta_rule_backward(rb); !st.ok()) return st;
    gates_backward(p, TL, g.data(), dg.data(), dbeta.data());
    for (int64_t t = 0; t < TL; ++t) {
      unsigned char* row = dmixed.data() + t * D * es;
      std::memcpy(row, dq.data() + t * qk_bytes, static_cast<size_t>(qk_bytes));
      std::memcpy(row + qk_bytes, dk.data() + t * qk_bytes, static_cast<size_t>(qk_bytes));
      std::memcpy(row + 2 * qk_bytes, dv.data() + t * v_bytes, static_cast<size_t>(v_bytes));
    }
  } else {
    // No live tokens: only the states' gradients pass through.
    std::fill(p.dnorm_weight, p.dnorm_weight + V, 0.0f);
    std::fill(p.dA_log, p.dA_log + HV, 0.0f);
    std::fill(p.ddt_bias, p.ddt_bias + HV, 0.0f);
    if (p.dinitial_state) {
      const int64_t n = N * HV * K * V;
      if (p.d_final_state)
        std::memmove(p.dinitial_state, p.d_final_state, static_cast<size_t>(n) * sizeof(float));
      else
        std::fill(p.dinitial_state, p.dinitial_state + n, 0.0f);
    }
  }
  // Tokens past cu_seqlens[-1]: exactly zero (the conv's backward zeroes dqkv's).
  std::memset(static_cast<char*>(p.dz) + TL * HV * V * es, 0,
              static_cast<size_t>((T - TL) * HV * V * es));
  std::memset(static_cast<char*>(p.da) + TL * HV * es, 0, static_cast<size_t>((T - TL) * HV * es));
  std::memset(static_cast<char*>(p.db) + TL * HV * es, 0, static_cast<size_t>((T - TL) * HV * es));

  CausalConv1dBackwardParams cb;
  cb.seq_len = T;
  cb.channels = D;
  cb.width = W;
  cb.dtype = f.dtype;
  cb.x = f.qkv;
  cb.weight = f.conv_weight;
  cb.bias = f.conv_bias;
  cb.cu_seqlens = f.cu_seqlens;
  cb.num_seqs = f.num_seqs;
  cb.initial_state = f.initial_conv_state;
  cb.d_out = dmixed.data();
  cb.d_final_state = p.d_final_conv_state;
  cb.dx = p.dqkv;
  cb.dweight = p.dconv_weight;
  cb.dbias = p.dconv_bias;
  cb.dinitial_state = p.dinitial_conv_state;
  cb.num_threads = f.num_threads;
  return causal_conv1d_backward(cb);
}

}  // namespace deltacheck::kernels::cpu
