// CPU causal conv1d: (sequence, token block, channel block) tiles in parallel. Each tile gathers
// its input window, carried-in state rows included, into fp32 once, and the weight is transposed to
// [W, D] so the inner loops run over contiguous channels.
#include "kernels/cpu/causal_conv1d.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/row_conversion.h"
#include "kernels/cpu/sequence_checks.h"

namespace deltacheck::kernels::cpu {
namespace {

constexpr int64_t kTokenBlock = 32;
constexpr int64_t kChannelBlock = 256;

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

Status check(const CausalConv1dParams& p) {
  if (p.batch < 1 || p.seq_len < 0) return Status::InvalidArgument("batch must be >= 1, T >= 0");
  if (p.channels < 1) return Status::InvalidArgument("channels must be >= 1");
  if (Status st = check_dtype(p.dtype, "x and out"); !st.ok()) return st;
  if (p.width < 2 || p.width > 4)
    return Status::Unsupported("conv width " + std::to_string(p.width) + " (supported: 2..4)");
  if (!p.x || !p.out || !p.weight) return Status::InvalidArgument("x, out and weight are required");
  if (p.cu_seqlens) {
    if (p.batch != 1) return Status::InvalidArgument("cu_seqlens requires batch == 1");
    if (Status st = check_cu_seqlens(p.cu_seqlens, p.num_seqs, p.seq_len); !st.ok()) return st;
  }
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch;
  if (!p.initial_state && !p.final_state) return Status::Ok();
  return check_state_slots(p.state_slots, n, p.num_state_rows > 0 ? p.num_state_rows : n,
                           p.final_state != nullptr);
}

// A sequence as the tiles see it: rows [first, first + len) of the flattened [B * T, D] input.
struct Sequence {
  int64_t first, len;
  int64_t row;         // state row
  const float* state;  // carried-in [D, W-1], or nullptr for zeros
};

struct Tile {
  int64_t seq, t0, t1, c0, c1;
};

template <int W>
void conv_tile(const CausalConv1dParams& p, const float* wt, const Sequence& s, const Tile& tile,
               std::vector<float>& window) {
  const int64_t D = p.channels, c0 = tile.c0, cw = tile.c1 - tile.c0;
  const int64_t rows = tile.t1 - tile.t0 + W - 1;
  window.resize(static_cast<size_t>(rows * cw));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = tile.t0 - (W - 1) + r;  // token within the sequence; < 0: carried-in state
    float* dst = &window[r * cw];
    if (i >= 0) {
      load_row(p.x, p.dtype, (s.first + i) * D + c0, cw, dst);
    } else if (s.state) {
      for (int64_t c = 0; c < cw; ++c) dst[c] = s.state[(c0 + c) * (W - 1) + (W - 1) + i];
    } else {
      std::fill(dst, dst + cw, 0.0f);
    }
  }
  float acc[kChannelBlock];
  for (int64_t t = tile.t0; t < tile.t1; ++t) {
    for (int64_t c = 0; c < cw; ++c) acc[c] = p.bias ? p.bias[c0 + c] : 0.0f;
    for (int j = 0; j < W; ++j) {
      const float* wj = wt + j * D + c0;
      const float* xr = &window[(t - tile.t0 + j) * cw];
      for (int64_t c = 0; c < cw; ++c) acc[c] += wj[c] * xr[c];
    }
    if (p.silu)
      for (int64_t c = 0; c < cw; ++c) acc[c] = silu(acc[c]);
    store_row(p.out, p.dtype, (s.first + t) * D + c0, cw, acc);
  }
}

// The last W-1 inputs of the sequence, reaching into its carried-in state when it is shorter.
template <int W>
void store_final_state(const CausalConv1dParams& p, const Sequence& s) {
  const int64_t D = p.channels;
  float* dst = p.final_state + s.row * D * (W - 1);
  for (int64_t d = 0; d < D; ++d) {
    float last[W - 1];  // gathered first: dst may be the row s.state points at
    for (int j = 0; j < W - 1; ++j) {
      const int64_t i = s.len - (W - 1) + j;
      last[j] = i >= 0 ? load_as_float(p.x, p.dtype, (s.first + i) * D + d)
                       : (s.state ? s.state[d * (W - 1) + (W - 1) + i] : 0.0f);
    }
    for (int j = 0; j < W - 1; ++j) dst[d * (W - 1) + j] = last[j];
  }
}

template <int W>
Status run_conv(const CausalConv1dParams& p) {
  const int64_t D = p.channels, n = p.cu_seqlens ? p.num_seqs : p.batch;
  std::vector<float> wt(static_cast<size_t>(W * D));
  for (int64_t d = 0; d < D; ++d)
    for (int j = 0; j < W; ++j) wt[j * D + d] = p.weight[d * W + j];

  std::vector<Sequence> seqs;
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = p.state_slots ? p.state_slots[i] : i;
    if (row < 0) continue;  // padding entry
    const bool has_state = p.initial_state && (!p.has_initial_state || p.has_initial_state[i]);
    const int64_t first = p.cu_seqlens ? p.cu_seqlens[i] : i * p.seq_len;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[i + 1] - p.cu_seqlens[i] : p.seq_len;
    const int64_t s = static_cast<int64_t>(seqs.size());
    seqs.push_back({first, len, row, has_state ? p.initial_state + row * D * (W - 1) : nullptr});
    for (int64_t t0 = 0; t0 < len; t0 += kTokenBlock)
      for (int64_t c0 = 0; c0 < D; c0 += kChannelBlock)
        tiles.push_back(
            {s, t0, std::min(len, t0 + kTokenBlock), c0, std::min(D, c0 + kChannelBlock)});
  }
  core::parallel_for(static_cast<int64_t>(tiles.size()), p.num_threads, [&](int64_t i) {
    thread_local std::vector<float> window;
    conv_tile<W>(p, wt.data(), seqs[tiles[i].seq], tiles[i], window);
  });
  // Only after every tile has read the carried-in states may they be overwritten (in place).
  if (p.final_state)
    core::parallel_for(static_cast<int64_t>(seqs.size()), p.num_threads,
                       [&](int64_t i) { store_final_state<W>(p, seqs[i]); });
  return Status::Ok();
}

template <int W>
void update_rows(const CausalConv1dUpdateParams& p, int64_t seq, int64_t row, int64_t c0,
                 int64_t c1) {
  const int64_t D = p.channels, n = p.tokens_per_seq;
  const int64_t C = p.state_columns > 0 ? p.state_columns : W - 1;
  const int64_t off = p.num_accepted_tokens ? p.num_accepted_tokens[seq] - 1 : 0;
  float* state = p.state + row * D * C;
  std::vector<float> buf(static_cast<size_t>(off + W - 1 + n));  // the row's window, then x
  for (int64_t d = c0; d < c1; ++d) {
    float* st = state + d * C;
    const float* w = p.weight + d * W;
    std::copy(st, st + off + W - 1, buf.begin());
    for (int64_t t = 0; t < n; ++t) {
      const int64_t at = (seq * n + t) * D + d;
      const float x = load_as_float(p.x, p.dtype, at);
      buf[off + W - 1 + t] = x;
      const float* win = &buf[off + t];
      float acc = p.bias ? p.bias[d] : 0.0f;
      for (int j = 0; j < W - 1; ++j) acc += w[j] * win[j];
      acc += w[W - 1] * x;
      store_from_float(p.out, p.dtype, at, p.silu ? silu(acc) : acc);
      if (p.token_states)  // the W-1 inputs ending at token t
        std::copy(win + 1, win + W, p.token_states + ((seq * n + t) * D + d) * (W - 1));
    }
    std::copy(buf.end() - C, buf.end(), st);
  }
}

template <int W>
Status run_update(const CausalConv1dUpdateParams& p) {
  const int64_t D = p.channels;
  const int64_t blocks = (D + kChannelBlock - 1) / kChannelBlock;
  core::parallel_for(p.num_seqs * blocks, p.num_threads, [&](int64_t i) {
    const int64_t seq = i / blocks, c0 = (i % blocks) * kChannelBlock;
    const int64_t row = p.state_slots ? p.state_slots[seq] : seq;
    if (row < 0) return;  // padding entry
    update_rows<W>(p, seq, row, c0, std::min(D, c0 + kChannelBlock));
  });
  return Status::Ok();
}

}  // namespace

Status causal_conv1d(const CausalConv1dParams& p) {
  if (Status st = check(p); !st.ok()) return st;
  switch (p.width) {
    case 2:
      return run_conv<2>(p);
    case 3:
      return run_conv<3>(p);
    default:
      return run_conv<4>(p);
  }
}

Status causal_conv1d_checkpoints(const CausalConv1dParams& p, int64_t block_size,
                                 const int32_t* block_slots, int64_t max_blocks, float* pool,
                                 int64_t num_rows) {
  if (Status st = check(p); !st.ok()) return st;
  if (block_size < 1 || !block_slots || !pool || max_blocks < 1)
    return Status::InvalidArgument("checkpoints need block_size >= 1, block_slots and a pool");
  const int64_t n = p.cu_seqlens ? p.num_seqs : p.batch, D = p.channels, W = p.width;
  for (int64_t i = 0; i < n * max_blocks; ++i)
    if (block_slots[i] >= num_rows)
      return Status::InvalidArgument("block_slots[" + std::to_string(i) +
                                     "] = " + std::to_string(block_slots[i]) +
                                     " >= " + std::to_string(num_rows) + " rows");
  core::parallel_for(n, p.num_threads, [&](int64_t i) {
    const int64_t row = p.state_slots ? p.state_slots[i] : i;
    if (row < 0) return;  // padding entry
    const bool has_state = p.initial_state && (!p.has_initial_state || p.has_initial_state[i]);
    const float* state = has_state ? p.initial_state + row * D * (W - 1) : nullptr;
    const int64_t first = p.cu_seqlens ? p.cu_seqlens[i] : i * p.seq_len;
    const int64_t len = p.cu_seqlens ? p.cu_seqlens[i + 1] - p.cu_seqlens[i] : p.seq_len;
    for (int64_t b = 0; b < max_blocks && b * block_size < len; ++b) {
      const int32_t slot = block_slots[i * max_blocks + b];
      if (slot < 0) continue;
      const int64_t end = std::min(len, (b + 1) * block_size);
      float* dst = pool + slot * D * (W - 1);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = 0; j < W - 1; ++j) {
          const int64_t t = end - (W - 1) + j;  // < 0: the initial state's column W-1 + t
          dst[d * (W - 1) + j] = t >= 0 ? load_as_float(p.x, p.dtype, (first + t) * D + d)
                                        : (state ? state[d * (W - 1) + (W - 1) + t] : 0.0f);
        }
    }
  });
  return Status::Ok();
}

Status causal_conv1d_update(const CausalConv1dUpdateParams& p) {
  if (p.num_seqs < 0 || p.channels < 1)
    return Status::InvalidArgument("num_seqs must be >= 0 and channels >= 1");
  if (Status st = check_dtype(p.dtype, "x and out"); !st.ok()) return st;
  if (p.width < 2 || p.width > 4)
    return Status::Unsupported("conv width " + std::to_string(p.width) + " (supported: 2..4)");
  if (!p.x || !p.out || !p.weight || !p.state)
    return Status::InvalidArgument("x, out, weight and state are required");
  const int64_t rows = p.num_state_rows > 0 ? p.num_state_rows : p.num_seqs;
  if (Status st = check_state_slots(p.state_slots, p.num_seqs, rows, true); !st.ok()) return st;
  const int64_t C = p.state_columns > 0 ? p.state_columns : p.width - 1;
  if (p.tokens_per_seq < 1 || C < p.width - 1 || C > p.width - 2 + p.tokens_per_seq)
    return Status::InvalidArgument("state_columns must be in W-1 .. W-2+tokens_per_seq (" +
                                   std::to_string(C) + " with W=" + std::to_string(p.width) + ", " +
                                   std::to_string(p.tokens_per_seq) + " tokens)");
  for (int64_t i = 0; p.num_accepted_tokens && i < p.num_seqs; ++i)
    if (p.num_accepted_tokens[i] < 1 || p.num_accepted_tokens[i] > C - p.width + 2)
      return Status::InvalidArgument("num_accepted_tokens[" + std::to_string(i) +
                                     "] = " + std::to_string(p.num_accepted_tokens[i]) + " (1.." +
                                     std::to_string(C - p.width + 2) + ")");
  switch (p.width) {
    case 2:
      return run_update<2>(p);
    case 3:
      return run_update<3>(p);
    default:
      return run_update<4>(p);
  }
}

}  // namespace deltacheck::kernels::cpu
