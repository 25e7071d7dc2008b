// CPU gated delta rule decode: one task per (sequence, value head), the state updated in place in
// the pool with two passes over it per token, each over contiguous rows of V.
#include "kernels/cpu/recurrent_decode.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/recurrent_step.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

// Loads q or k of one token and head as fp32, with the optional L2 norm and a factor.
void load_qk(const RecurrentDecodeParams& p, const void* src, int64_t offset, float factor,
             float* dst) {
  const int64_t K = p.key_dim;
  load_row(src, p.dtype, offset, K, dst);
  float inv = 1.0f;
  if (p.use_qk_l2norm) {
    float ss = 0.0f;
    for (int64_t i = 0; i < K; ++i) ss += dst[i] * dst[i];
    inv = 1.0f / std::sqrt(ss + 1e-6f);
  }
  const float f = inv * factor;
  for (int64_t i = 0; i < K; ++i) dst[i] *= f;
}

// The pool row sequence seq starts from (negative: a padding entry).
int64_t start_row(const RecurrentDecodeParams& p, int64_t seq) {
  if (p.parents) return p.state_slots[seq];
  if (p.state_indices) {
    const int64_t accepted = p.num_accepted_tokens ? p.num_accepted_tokens[seq] : 1;
    return p.state_indices[seq * p.tokens_per_seq + accepted - 1];
  }
  return p.state_slots ? p.state_slots[seq] : seq;
}

void decode_lane(const RecurrentDecodeParams& p, int64_t seq, int64_t head, int64_t row,
                 std::vector<float>& scratch) {
  const int64_t K = p.key_dim, V = p.value_dim, H = p.num_heads, HV = p.num_value_heads;
  const int64_t qk_head = head / (HV / H);
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(K));
  float* q = scratch.data();
  float* k = q + K;
  float* u = k + K;
  float* o = u + V;
  float* v = o + V;
  float* S = p.state + (row * HV + head) * K * V;  // [K][V]
  if (p.state_indices) {  // per-token rows: work on a copy of the start row
    std::copy_n(S, K * V, v + V);
    S = v + V;
  }
  for (int64_t t = 0; t < p.tokens_per_seq; ++t) {
    const int64_t token = seq * p.tokens_per_seq + t;
    const int64_t lane = token * HV + head;
    if (p.parents) {  // a tree: from the parent's row (written earlier by this lane) or the start
      const int32_t parent = p.parents[token];
      const int64_t from = parent < 0 ? row : p.state_indices[seq * p.tokens_per_seq + parent];
      std::copy_n(p.state + (from * HV + head) * K * V, K * V, S);
    }
    load_qk(p, p.q, (token * H + qk_head) * K, scale, q);
    load_qk(p, p.k, (token * H + qk_head) * K, 1.0f, k);
    const float decay = std::exp(p.g[lane]);
    const float beta = load_as_float(p.beta, p.dtype, lane);
    load_row(p.v, p.dtype, lane * V, V, v);
    recurrent_step(S, q, k, v, decay, beta, K, V, u, o);
    store_row(p.o, p.dtype, lane * V, V, o);
    if (p.state_indices) {
      const int32_t dst = p.state_indices[token];
      if (dst >= 0) std::copy_n(S, K * V, p.state + (dst * HV + head) * K * V);
    }
    if (p.token_states) {
      float* dst = p.token_states + lane * K * V;
      for (int64_t i = 0; i < K * V; ++i) dst[i] = S[i];
    }
  }
}

}  // namespace

Status recurrent_decode(const RecurrentDecodeParams& p) {
  if (p.num_seqs < 0 || p.tokens_per_seq < 1)
    return Status::InvalidArgument("num_seqs must be >= 0 and tokens_per_seq >= 1");
  if (p.num_heads < 1 || p.num_value_heads < 1 || p.key_dim < 1 || p.value_dim < 1)
    return Status::InvalidArgument("head counts and head dims must be >= 1");
  if (p.num_value_heads % p.num_heads != 0) return Status::InvalidArgument("HV % H != 0");
  if (Status st = check_dtype(p.dtype, "q, k, v, beta and o"); !st.ok()) return st;
  if (!p.q || !p.k || !p.v || !p.g || !p.beta || !p.o || !p.state)
    return Status::InvalidArgument("q, k, v, g, beta, o and state are required");
  const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : p.num_seqs;
  if (p.state_indices) {
    if (Status st =
            check_serving_rows(p.state_indices, p.parents ? nullptr : p.num_accepted_tokens,
                               p.parents, p.state_slots, p.num_seqs, p.tokens_per_seq, rows);
        !st.ok())
      return st;
  } else if (Status st = check_state_slots(p.state_slots, p.num_seqs, rows, true); !st.ok()) {
    return st;
  }

  const int64_t HV = p.num_value_heads;
  core::parallel_for(p.num_seqs * HV, p.num_threads, [&](int64_t i) {
    const int64_t seq = i / HV, head = i % HV;
    const int64_t row = start_row(p, seq);
    if (row < 0) return;  // padding entry
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(2 * p.key_dim + 3 * p.value_dim +
                                       (p.state_indices ? p.key_dim * p.value_dim : 0)));
    decode_lane(p, seq, head, row, scratch);
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
