// CPU linear-attention layer: the CPU kernels for each step, chained through workspaces.
#include "kernels/cpu/linear_attention_layer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/common/serving_rows.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_rms_norm.h"
#include "kernels/cpu/gates.h"
#include "kernels/cpu/recurrent_decode.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kTokensPerSplitTask = 256;

Status check(const LinearAttentionLayerParams& p) {
  if (p.seq_len < 0) return Status::InvalidArgument("seq_len must be >= 0");
  if (Status st = check_dtype(p.dtype, "activations"); !st.ok()) return st;
  if (p.num_heads < 1 || p.num_value_heads < 1 || p.key_dim < 1 || p.value_dim < 1)
    return Status::InvalidArgument("head counts and head dims must be >= 1");
  if (p.num_value_heads % p.num_heads != 0) return Status::InvalidArgument("HV % H != 0");
  if (p.conv_width < 2 || p.conv_width > 4)
    return Status::Unsupported("conv width " + std::to_string(p.conv_width) + " (supported: 2..4)");
  if (p.chunk_size < 1) return Status::InvalidArgument("chunk_size must be >= 1");
  if (!(p.norm_eps >= 0.0f)) return Status::InvalidArgument("norm_eps must be >= 0");
  if (!p.qkv || !p.z || !p.a || !p.b || !p.conv_weight || !p.A_log || !p.dt_bias ||
      !p.norm_weight || !p.out)
    return Status::InvalidArgument(
        "qkv, z, a, b, conv_weight, A_log, dt_bias, norm_weight and out are required");
  if (p.cu_seqlens)
    if (Status st = check_cu_seqlens(p.cu_seqlens, p.num_seqs, p.seq_len); !st.ok()) return st;
  const int64_t n = p.cu_seqlens ? p.num_seqs : 1;
  if (p.decode_tokens < 1) return Status::InvalidArgument("decode_tokens must be >= 1");
  if (p.checkpoints && (p.decode || !p.conv_checkpoint_pool))
    return Status::InvalidArgument("checkpoints need a prefill and conv_checkpoint_pool");
  if (p.decode)
    for (int64_t i = 0; i < n; ++i)
      if ((p.cu_seqlens ? p.cu_seqlens[i + 1] - p.cu_seqlens[i] : p.seq_len) != p.decode_tokens)
        return Status::InvalidArgument(
            "decode takes " + std::to_string(p.decode_tokens) +
            " token(s) per sequence; sequence " + std::to_string(i) + " has " +
            std::to_string(p.cu_seqlens ? p.cu_seqlens[i + 1] - p.cu_seqlens[i] : p.seq_len));
  if (p.state_indices) {
    if (!p.decode || !p.num_accepted_tokens || !p.final_state || !p.final_conv_state)
      return Status::InvalidArgument(
          "state_indices needs decode, num_accepted_tokens and both final state pools");
    if ((p.initial_state && p.initial_state != p.final_state) ||
        (p.initial_conv_state && p.initial_conv_state != p.final_conv_state))
      return Status::InvalidArgument("a speculative verify runs in place on its pools");
    const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
    return check_serving_rows(p.state_indices, p.num_accepted_tokens, nullptr, nullptr, n,
                              p.decode_tokens, rows);
  }
  const bool any_state =
      p.initial_state || p.final_state || p.initial_conv_state || p.final_conv_state;
  if (!any_state) return Status::Ok();
  return check_state_slots(p.state_slots, n, p.num_state_rows > 0 ? p.num_state_rows : n,
                           p.final_state || p.final_conv_state);
}

// Token ranges [begin, end) covered by sequences that are not padding, adjacent ones merged.
std::vector<std::pair<int64_t, int64_t>> live_token_spans(const LinearAttentionLayerParams& p) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  const int64_t n = p.cu_seqlens ? p.num_seqs : 1;
  for (int64_t i = 0; i < n; ++i) {
    if (p.state_slots && p.state_slots[i] < 0) continue;
    const int64_t begin = p.cu_seqlens ? p.cu_seqlens[i] : 0;
    const int64_t end = p.cu_seqlens ? p.cu_seqlens[i + 1] : p.seq_len;
    if (begin == end) continue;
    if (!spans.empty() && spans.back().second == begin)
      spans.back().second = end;
    else
      spans.emplace_back(begin, end);
  }
  return spans;
}

// The state rows a decode step updates in place: `final_rows` when the caller keeps them, else
// `scratch`; each live sequence's row starts as its initial row (zeros without one).
float* decode_rows(const LinearAttentionLayerParams& p, const float* initial, float* final_rows,
                   int64_t per_row, std::vector<float>& scratch) {
  const int64_t n = p.cu_seqlens ? p.num_seqs : 1;
  const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
  float* work = final_rows;
  if (!work) {
    scratch.assign(static_cast<size_t>(rows * per_row), 0.0f);
    work = scratch.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = p.state_slots ? p.state_slots[i] : i;
    if (row < 0) continue;  // padding entry
    float* dst = work + row * per_row;
    if (!initial || (p.has_initial_state && !p.has_initial_state[i]))
      std::fill(dst, dst + per_row, 0.0f);
    else if (initial + row * per_row != dst)
      std::copy(initial + row * per_row, initial + (row + 1) * per_row, dst);
  }
  return work;
}

// The fields the conv's prefill and update parameters share.
template <typename Conv>
Conv conv_params(const LinearAttentionLayerParams& p, int64_t D, void* mixed) {
  Conv c;
  c.channels = D;
  c.width = p.conv_width;
  c.dtype = p.dtype;
  c.x = p.qkv;
  c.out = mixed;
  c.weight = p.conv_weight;
  c.bias = p.conv_bias;
  c.silu = true;
  c.state_slots = p.state_slots;
  c.num_state_rows = p.num_state_rows;
  c.num_threads = p.num_threads;
  return c;
}

// The short convolution of every token into `mixed`: the prefill kernel, or one update step.
Status conv_step(const LinearAttentionLayerParams& p, int64_t D, void* mixed) {
  if (p.decode) {
    std::vector<float> scratch;
    CausalConv1dUpdateParams u = conv_params<CausalConv1dUpdateParams>(p, D, mixed);
    u.num_seqs = p.seq_len / p.decode_tokens;
    u.tokens_per_seq = p.decode_tokens;
    if (p.state_indices) {  // verify: the conv row is column 0's, in place
      std::vector<int32_t> rows(static_cast<size_t>(u.num_seqs));
      for (int64_t i = 0; i < u.num_seqs; ++i) rows[i] = p.state_indices[i * p.decode_tokens];
      u.state = p.final_conv_state;
      u.state_slots = rows.data();
      u.state_columns = p.conv_state_columns;
      u.num_accepted_tokens = p.num_accepted_tokens;
      return causal_conv1d_update(u);
    }
    u.state =
        decode_rows(p, p.initial_conv_state, p.final_conv_state, D * (p.conv_width - 1), scratch);
    u.token_states = p.token_conv_states;
    return causal_conv1d_update(u);
  }
  CausalConv1dParams conv = conv_params<CausalConv1dParams>(p, D, mixed);
  conv.seq_len = p.seq_len;
  conv.cu_seqlens = p.cu_seqlens;
  conv.num_seqs = p.num_seqs;
  conv.initial_state = p.initial_conv_state;
  conv.final_state = p.final_conv_state;
  conv.has_initial_state = p.has_initial_state;
  if (p.checkpoints)
    if (Status st = causal_conv1d_checkpoints(conv, p.checkpoints->block_size,
                                              p.checkpoints->block_slots, p.checkpoints->max_blocks,
                                              p.conv_checkpoint_pool, p.checkpoints->num_rows);
        !st.ok())
      return st;
  return causal_conv1d(conv);
}

// The fields the rule's chunked and decode parameters share (q, k, v, g, beta in, core out).
template <typename Rule>
Rule rule_params(const LinearAttentionLayerParams& p, const void* q, const void* k, const void* v,
                 const float* g, const void* beta, void* core) {
  Rule r;
  r.num_heads = p.num_heads;
  r.num_value_heads = p.num_value_heads;
  r.key_dim = p.key_dim;
  r.value_dim = p.value_dim;
  r.dtype = p.dtype;
  r.q = q, r.k = k, r.v = v, r.g = g, r.beta = beta, r.o = core;
  r.state_slots = p.state_slots;
  r.num_state_rows = p.num_state_rows;
  r.scale = p.scale;
  r.use_qk_l2norm = true;
  r.num_threads = p.num_threads;
  return r;
}

// The gated delta rule over every token into `core`: the chunked kernel, or one decode step.
Status rule_step(const LinearAttentionLayerParams& p, const void* q, const void* k, const void* v,
                 const float* g, const void* beta, void* core) {
  const int64_t per = p.num_value_heads * p.key_dim * p.value_dim;
  if (p.decode) {
    std::vector<float> scratch;
    RecurrentDecodeParams r = rule_params<RecurrentDecodeParams>(p, q, k, v, g, beta, core);
    r.num_seqs = p.seq_len / p.decode_tokens;
    r.tokens_per_seq = p.decode_tokens;
    if (p.state_indices) {  // verify: from the accepted row, every token's state into its row
      r.state = p.final_state;
      r.state_slots = nullptr;
      r.state_indices = p.state_indices;
      r.num_accepted_tokens = p.num_accepted_tokens;
      return recurrent_decode(r);
    }
    r.state = decode_rows(p, p.initial_state, p.final_state, per, scratch);
    r.token_states = p.token_states;
    return recurrent_decode(r);
  }
  GatedDeltaRuleParams rule = rule_params<GatedDeltaRuleParams>(p, q, k, v, g, beta, core);
  rule.seq_len = p.seq_len;
  rule.cu_seqlens = p.cu_seqlens;
  rule.num_seqs = p.num_seqs;
  rule.initial_state = p.initial_state;
  // Sequences without an initial state read zero rows of a copy of the initial states.
  std::vector<float> fresh;
  if (p.has_initial_state && p.initial_state) {
    const int64_t n = p.cu_seqlens ? p.num_seqs : 1;
    const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : n;
    fresh.assign(p.initial_state, p.initial_state + rows * per);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = p.state_slots ? p.state_slots[i] : i;
      if (row >= 0 && !p.has_initial_state[i])
        std::fill(fresh.begin() + row * per, fresh.begin() + (row + 1) * per, 0.0f);
    }
    rule.initial_state = fresh.data();
  }
  rule.final_state = p.final_state;
  rule.chunk_size = p.chunk_size;
  if (p.checkpoints) return chunked_gated_delta_rule(rule, *p.checkpoints);
  return chunked_gated_delta_rule(rule);
}

}  // namespace

int64_t qkv_channels(const LinearAttentionLayerParams& p) {
  return 2 * p.num_heads * p.key_dim + p.num_value_heads * p.value_dim;
}

Status linear_attention_layer(const LinearAttentionLayerParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  const int64_t T = p.seq_len, H = p.num_heads, HV = p.num_value_heads;
  const int64_t K = p.key_dim, V = p.value_dim, D = qkv_channels(p);
  const int64_t es = dtype_size(p.dtype);
  // Workspaces in the activation dtype; never empty, so no step sees a null buffer when T == 0.
  auto workspace = [&](int64_t elements) {
    return std::vector<unsigned char>(static_cast<size_t>(std::max<int64_t>(elements, 1) * es));
  };
  std::vector<unsigned char> mixed = workspace(T * D), q = workspace(T * H * K),
                             k = workspace(T * H * K), v = workspace(T * HV * V),
                             beta = workspace(T * HV), core = workspace(T * HV * V);
  std::vector<float> g(static_cast<size_t>(std::max<int64_t>(T * HV, 1)));

  if (Status st = conv_step(p, D, mixed.data()); !st.ok()) return st;

  // q | k | v channels of each token into the contiguous [T, heads, dim] layout the rule takes.
  const int64_t qk_bytes = H * K * es, v_bytes = HV * V * es;
  const int64_t split_tasks = (T + kTokensPerSplitTask - 1) / kTokensPerSplitTask;
  core::parallel_for(split_tasks, p.num_threads, [&](int64_t task) {
    const int64_t t1 = std::min(T, (task + 1) * kTokensPerSplitTask);
    for (int64_t t = task * kTokensPerSplitTask; t < t1; ++t) {
      const unsigned char* row = mixed.data() + t * D * es;
      std::memcpy(q.data() + t * qk_bytes, row, static_cast<size_t>(qk_bytes));
      std::memcpy(k.data() + t * qk_bytes, row + qk_bytes, static_cast<size_t>(qk_bytes));
      std::memcpy(v.data() + t * v_bytes, row + 2 * qk_bytes, static_cast<size_t>(v_bytes));
    }
  });

  GatesParams gp;
  gp.num_tokens = T;
  gp.num_value_heads = HV;
  gp.dtype = p.dtype;
  gp.a = p.a;
  gp.b = p.b;
  gp.A_log = p.A_log;
  gp.dt_bias = p.dt_bias;
  gp.g = g.data();
  gp.beta = beta.data();
  gp.num_threads = p.num_threads;
  if (Status st = gates(gp); !st.ok()) return st;

  if (Status st = rule_step(p, q.data(), k.data(), v.data(), g.data(), beta.data(), core.data());
      !st.ok())
    return st;

  // The norm runs only over tokens of real sequences: padding entries' output rows stay untouched.
  for (const auto& [begin, end] : live_token_spans(p)) {
    const int64_t offset = begin * HV * V;
    GatedRmsNormParams norm;
    norm.num_tokens = end - begin;
    norm.num_heads = HV;
    norm.dim = V;
    norm.dtype = p.dtype;
    norm.x = core.data() + offset * es;
    norm.z = static_cast<const unsigned char*>(p.z) + offset * es;
    norm.weight = p.norm_weight;
    norm.y = static_cast<unsigned char*>(p.out) + offset * es;
    norm.eps = p.norm_eps;
    norm.num_threads = p.num_threads;
    if (Status st = gated_rms_norm(norm); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
