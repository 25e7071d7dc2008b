// CPU backward of the depthwise causal conv1d: blocks of channels spread over threads; per block
// each sequence's inputs (its conv state first) are loaded once, the pre-activations recomputed
// and their gradients spread back over the inputs and the weights in fp32.
#include "kernels/cpu/causal_conv1d_backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kChannelsPerTask = 16;

Status check(const CausalConv1dBackwardParams& p) {
  if (p.batch < 1 || p.seq_len < 0 || p.channels < 1)
    return Status::InvalidArgument("batch and channels must be >= 1, seq_len >= 0");
  if (p.width < 2 || p.width > 4)
    return Status::Unsupported("conv width " + std::to_string(p.width) + " (supported: 2..4)");
  if (Status st = check_dtype(p.dtype, "x, d_out and dx"); !st.ok()) return st;
  if (!p.x || !p.weight || !p.d_out || !p.dx || !p.dweight)
    return Status::InvalidArgument("x, weight, d_out, dx and dweight are required");
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens needs batch == 1");
    if (p.num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
    const int64_t end = p.cu_seqlens[p.num_seqs];
    if (end < 0 || end > p.seq_len)
      return Status::InvalidArgument("cu_seqlens[-1] must be in [0, T]");
    if (Status st = check_cu_seqlens(p.cu_seqlens, p.num_seqs, end); !st.ok()) return st;
  }
  return Status::Ok();
}

inline float silu_grad(float x) {
  const float s = 1.0f / (1.0f + std::exp(-x));
  return s * (1.0f + x * (1.0f - s));
}

}  // namespace

Status causal_conv1d_backward(const CausalConv1dBackwardParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  const int64_t D = p.channels, W = p.width, C = W - 1, T = p.seq_len;
  const int64_t n_seqs = p.cu_seqlens ? p.num_seqs : p.batch;
  const int64_t es = dtype_size(p.dtype);
  // Tokens past cu_seqlens[-1]: exactly zero.
  if (p.cu_seqlens) {
    const int64_t live = p.cu_seqlens[n_seqs];
    std::memset(static_cast<char*>(p.dx) + live * D * es, 0,
                static_cast<size_t>((T - live) * D * es));
  }
  const int64_t tasks = (D + kChannelsPerTask - 1) / kChannelsPerTask;
  core::parallel_for(tasks, p.num_threads, [&](int64_t task) {
    const int64_t d0 = task * kChannelsPerTask, cb = std::min(D, d0 + kChannelsPerTask) - d0;
    thread_local std::vector<float> in, grad, row;
    std::vector<float> dw(static_cast<size_t>(cb * W), 0.0f), db(static_cast<size_t>(cb), 0.0f);
    row.resize(static_cast<size_t>(cb));
    for (int64_t n = 0; n < n_seqs; ++n) {
      const int64_t first = p.cu_seqlens ? p.cu_seqlens[n] : n * T;
      const int64_t len = p.cu_seqlens ? p.cu_seqlens[n + 1] - first : T;
      // Position i of the sequence (i >= -C; i < 0: its conv state) at row i + C.
      in.assign(static_cast<size_t>((len + C) * cb), 0.0f);
      grad.assign(static_cast<size_t>((len + C) * cb), 0.0f);
      if (p.initial_state)
        for (int64_t dd = 0; dd < cb; ++dd)
          for (int64_t j = 0; j < C; ++j)
            in[j * cb + dd] = p.initial_state[(n * D + d0 + dd) * C + j];
      for (int64_t t = 0; t < len; ++t)
        load_row(p.x, p.dtype, (first + t) * D + d0, cb, in.data() + (t + C) * cb);
      if (p.d_final_state)  // the last C inputs (reaching into the state when len < C)
        for (int64_t dd = 0; dd < cb; ++dd)
          for (int64_t j = 0; j < C; ++j)
            grad[(len + j) * cb + dd] += p.d_final_state[(n * D + d0 + dd) * C + j];
      for (int64_t t = 0; t < len; ++t) {
        load_row(p.d_out, p.dtype, (first + t) * D + d0, cb, row.data());
        const float* x = in.data() + t * cb;  // the window's oldest input
        float* g = grad.data() + t * cb;
        for (int64_t dd = 0; dd < cb; ++dd) {
          const float* w = p.weight + (d0 + dd) * W;
          float acc = p.bias ? p.bias[d0 + dd] : 0.0f;
          for (int64_t j = 0; j < W; ++j) acc += w[j] * x[j * cb + dd];
          const float dacc = p.silu ? row[dd] * silu_grad(acc) : row[dd];
          db[dd] += dacc;
          for (int64_t j = 0; j < W; ++j) {
            dw[dd * W + j] += dacc * x[j * cb + dd];
            g[j * cb + dd] += dacc * w[j];
          }
        }
      }
      for (int64_t t = 0; t < len; ++t)
        store_row(p.dx, p.dtype, (first + t) * D + d0, cb, grad.data() + (t + C) * cb);
      if (p.dinitial_state)
        for (int64_t dd = 0; dd < cb; ++dd)
          for (int64_t j = 0; j < C; ++j)
            p.dinitial_state[(n * D + d0 + dd) * C + j] = grad[j * cb + dd];
    }
    std::copy(dw.begin(), dw.end(), p.dweight + d0 * W);
    if (p.dbias) std::copy(db.begin(), db.end(), p.dbias + d0);
  });
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
