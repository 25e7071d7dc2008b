// CPU mask builder: every query row allows one interval of keys [lo, hi) (causal, window, chunk and
// segment each bound it from one or both sides), ANDed with the row's padding; rows are filled with
// memset-like runs and split across threads when the mask is large.
#include "kernels/cpu/mask_builder.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/parallel_for.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/common/mask_builder_common.h"

namespace deltacheck::kernels::cpu {
namespace {

// Python's //, so a left-padding query (q_abs < lp) falls into a negative chunk as in Transformers.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

float fill_value(AdditiveFill fill) {
  switch (fill) {
    case AdditiveFill::kFloat32Lowest:
      return std::numeric_limits<float>::lowest();
    case AdditiveFill::kBFloat16Lowest: {
      const uint32_t bits = 0xff7f0000u;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case AdditiveFill::kFloat16Lowest:
      return -65504.0f;
    case AdditiveFill::kNegativeInfinity:
      return -std::numeric_limits<float>::infinity();
  }
  return 0.0f;
}

// Per-row facts, computed once: where each row's queries sit, how much left padding it has, and
// the [start, end) of each packed segment in new-token coordinates.
struct Layout {
  const MaskParams* p = nullptr;
  std::vector<int64_t> offset;         // [B]
  std::vector<int64_t> left_padding;   // [B]
  std::vector<int64_t> segment;        // [B, q_len] segment of each new token (packing only)
  std::vector<int64_t> segment_end;    // [B, q_len] new-token end of the token's segment
  std::vector<int64_t> segment_begin;  // [B, q_len] new-token start of the token's segment
  bool packed = false;                 // position_ids given

  int64_t row_offset(int64_t b) const { return offset[static_cast<size_t>(b)]; }
};

Layout make_layout(const MaskParams& p) {
  Layout l;
  l.p = &p;
  const size_t batch = static_cast<size_t>(p.batch);
  l.offset.resize(batch);
  l.left_padding.assign(batch, 0);
  for (size_t b = 0; b < batch; ++b) {
    l.offset[b] = mask_row_offset(p, static_cast<int64_t>(b));
    if (p.padding_mask) {
      const uint8_t* row = p.padding_mask + b * static_cast<size_t>(p.kv_length);
      int64_t lp = 0;
      while (lp < p.kv_length && row[lp] == 0) ++lp;
      l.left_padding[b] = lp;
    }
  }
  if (p.position_ids) {
    l.packed = true;
    const size_t n = batch * static_cast<size_t>(p.q_len);
    l.segment.resize(n);
    l.segment_begin.resize(n);
    l.segment_end.resize(n);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t* pos = p.position_ids + b * p.q_len;  // row 0 of [rows, B, q_len]
      const size_t base = static_cast<size_t>(b * p.q_len);
      int64_t seg = 0, begin = 0;
      for (int64_t q = 0; q < p.q_len; ++q) {
        if (q > 0 && pos[q] - pos[q - 1] != 1) {
          for (int64_t i = begin; i < q; ++i) l.segment_end[base + static_cast<size_t>(i)] = q;
          ++seg;
          begin = q;
        }
        l.segment[base + static_cast<size_t>(q)] = seg;
        l.segment_begin[base + static_cast<size_t>(q)] = begin;
      }
      for (int64_t i = begin; i < p.q_len; ++i) {
        l.segment_end[base + static_cast<size_t>(i)] = p.q_len;
      }
    }
  }
  return l;
}

struct Interval {
  int64_t lo, hi;
};

// The keys query (b, q) may see before padding: the intersection of each rule's interval.
Interval row_interval(const Layout& l, int64_t b, int64_t q) {
  const MaskParams& p = *l.p;
  const int64_t off = l.row_offset(b);
  const int64_t q_abs = off + q;
  int64_t lo = 0, hi = p.kv_length;
  if (p.causal) hi = std::min(hi, q_abs + 1);
  if (p.sliding_window > 0) lo = std::max(lo, q_abs - p.sliding_window + 1);
  if (p.chunk_size > 0) {
    const int64_t lp = l.left_padding[static_cast<size_t>(b)];
    const int64_t chunk = floor_div(q_abs - lp, p.chunk_size);
    lo = std::max(lo, lp + chunk * p.chunk_size);
    hi = std::min(hi, lp + (chunk + 1) * p.chunk_size);
  }
  if (l.packed) {
    const size_t i = static_cast<size_t>(b * p.q_len + q);
    // Segment 0 also owns the cached prefix [0, off); unwritten slots belong to no segment.
    const int64_t seg_lo = l.segment[i] == 0 ? 0 : off + l.segment_begin[i];
    lo = std::max(lo, seg_lo);
    hi = std::min(hi, off + l.segment_end[i]);
  }
  lo = std::max<int64_t>(lo, 0);
  hi = std::min(hi, p.kv_length);
  if (hi < lo) hi = lo;
  return {lo, hi};
}

// Runs body(row_begin, row_end) over the B * q_len rows, in blocks of rows on the project's pool
// (core/parallel_for.h) for large masks. Rows are independent: the bits do not depend on the split.
template <typename Body>
void for_rows(const MaskParams& p, const Body& body) {
  const int64_t rows = p.batch * p.q_len;
  const int64_t elements = rows * p.kv_length;
  constexpr int64_t kMinElementsPerThread = int64_t{1} << 18;
  const int threads =
      static_cast<int>(std::min<int64_t>({core::resolve_threads(p.num_threads), rows,
                                          std::max<int64_t>(1, elements / kMinElementsPerThread)}));
  if (threads <= 1) {
    body(0, rows);
    return;
  }
  const int64_t per = (rows + threads - 1) / threads;
  const int64_t blocks = (rows + per - 1) / per;
  core::parallel_for(blocks, threads,
                     [&](int64_t t) { body(t * per, std::min(rows, (t + 1) * per)); });
}

Status null_output(const void* out, int64_t elements) {
  if (elements > 0 && out == nullptr)
    return Status::InvalidArgument("mask builder: output is null");
  return Status::Ok();
}

}  // namespace

Status validate(const MaskParams& p) {
  if (Status s = validate_mask_params(p); !s.ok()) return s;
  if (p.num_threads < 0) return Status::InvalidArgument("mask params: num_threads must be >= 0");
  return Status::Ok();
}

Status build_bool_mask(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (!s.ok()) return s;
  s = null_output(out, p.batch * p.q_len * p.kv_length);
  if (!s.ok() || p.batch * p.q_len * p.kv_length == 0) return s;
  const Layout l = make_layout(p);
  const int64_t kv = p.kv_length;
  for_rows(p, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / p.q_len, q = r % p.q_len;
      uint8_t* row = out + r * kv;
      const Interval in = row_interval(l, b, q);
      std::memset(row, 0, static_cast<size_t>(in.lo));
      std::memset(row + in.lo, 1, static_cast<size_t>(in.hi - in.lo));
      std::memset(row + in.hi, 0, static_cast<size_t>(kv - in.hi));
      if (p.padding_mask) {
        const uint8_t* pad = p.padding_mask + b * kv;
        for (int64_t j = in.lo; j < in.hi; ++j) row[j] = static_cast<uint8_t>(pad[j] != 0);
      }
    }
  });
  return Status::Ok();
}

Status build_additive_mask(const MaskParams& p, AdditiveFill fill, float* out) {
  Status s = validate(p);
  if (!s.ok()) return s;
  s = null_output(out, p.batch * p.q_len * p.kv_length);
  if (!s.ok() || p.batch * p.q_len * p.kv_length == 0) return s;
  const Layout l = make_layout(p);
  const int64_t kv = p.kv_length;
  const float denied = fill_value(fill);
  for_rows(p, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / p.q_len, q = r % p.q_len;
      float* row = out + r * kv;
      const Interval in = row_interval(l, b, q);
      std::fill(row, row + in.lo, denied);
      std::fill(row + in.lo, row + in.hi, 0.0f);
      std::fill(row + in.hi, row + kv, denied);
      if (p.padding_mask) {
        const uint8_t* pad = p.padding_mask + b * kv;
        for (int64_t j = in.lo; j < in.hi; ++j) row[j] = pad[j] != 0 ? 0.0f : denied;
      }
    }
  });
  return Status::Ok();
}

Status mask_needed(const MaskParams& p, bool* needed) {
  Status s = validate(p);
  if (!s.ok()) return s;
  if (needed == nullptr) return Status::InvalidArgument("mask builder: output is null");
  const Layout l = make_layout(p);
  bool need = p.static_cache || !p.causal;
  need = need || (p.sliding_window > 0 && p.kv_length >= p.sliding_window);
  need = need || (p.chunk_size > 0 && p.kv_length >= p.chunk_size);
  if (p.padding_mask) {
    const int64_t n = p.batch * p.kv_length;
    need = need || std::find(p.padding_mask, p.padding_mask + n, uint8_t{0}) != p.padding_mask + n;
  }
  if (l.packed) {
    for (int64_t b = 0; b < p.batch && p.q_len > 0; ++b) {
      need = need || l.segment[static_cast<size_t>(b * p.q_len + p.q_len - 1)] != 0;
    }
  }
  bool implicit_ok = p.q_len == p.kv_length;  // validate() forces every offset to 0 then
  if (!implicit_ok && p.q_len == 1) {
    implicit_ok = true;
    for (int64_t b = 0; b < p.batch; ++b) {
      implicit_ok = implicit_ok && l.row_offset(b) == p.kv_length - 1;
    }
  }
  *needed = need || !implicit_ok;
  return Status::Ok();
}

Status fully_masked_rows(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (!s.ok()) return s;
  s = null_output(out, p.batch * p.q_len);
  if (!s.ok()) return s;
  const Layout l = make_layout(p);
  for_rows(p, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / p.q_len, q = r % p.q_len;
      const Interval in = row_interval(l, b, q);
      bool any = in.hi > in.lo;
      if (any && p.padding_mask) {
        const uint8_t* pad = p.padding_mask + b * p.kv_length;
        any = std::any_of(pad + in.lo, pad + in.hi, [](uint8_t v) { return v != 0; });
      }
      out[r] = any ? 0 : 1;
    }
  });
  return Status::Ok();
}

Status token_validity(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (!s.ok()) return s;
  s = null_output(out, p.batch * p.q_len);
  if (!s.ok() || p.batch * p.q_len == 0) return s;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t off = mask_row_offset(p, b);
    uint8_t* row = out + b * p.q_len;
    if (!p.padding_mask) {
      std::memset(row, 1, static_cast<size_t>(p.q_len));
      continue;
    }
    const uint8_t* pad = p.padding_mask + b * p.kv_length + off;
    for (int64_t q = 0; q < p.q_len; ++q) row[q] = static_cast<uint8_t>(pad[q] != 0);
  }
  return Status::Ok();
}

namespace {
DELTACHECK_MASK_BUILDER_API(Builder, ::deltacheck::kernels::cpu);
}  // namespace

Status layer_masks(const std::vector<std::string>& layer_types, const MaskParams& p,
                   LayerMasks* out) {
  return compose_layer_masks<Builder>(layer_types, p, out);
}

Status sequence_index_from_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, int64_t* out) {
  if (cu_seqlens == nullptr || num_seqs < 0) {
    return Status::InvalidArgument("cu_seqlens: null or negative num_seqs");
  }
  if (cu_seqlens[0] != 0) return Status::InvalidArgument("cu_seqlens must start at 0");
  for (int64_t i = 0; i < num_seqs; ++i) {
    if (cu_seqlens[i + 1] < cu_seqlens[i]) {
      return Status::InvalidArgument("cu_seqlens must be non-decreasing (index " +
                                     std::to_string(i + 1) + ")");
    }
  }
  if (cu_seqlens[num_seqs] > 0 && out == nullptr) {
    return Status::InvalidArgument("mask builder: output is null");
  }
  for (int64_t i = 0; i < num_seqs; ++i) {
    std::fill(out + cu_seqlens[i], out + cu_seqlens[i + 1], i);
  }
  return Status::Ok();
}

Status segments_from_position_ids(const int64_t* position_ids, int64_t batch, int64_t len,
                                  PackedSegments* out) {
  if (out == nullptr || batch < 0 || len < 0 || (batch * len > 0 && position_ids == nullptr)) {
    return Status::InvalidArgument("segments_from_position_ids: bad arguments");
  }
  PackedSegments r;
  const int64_t n = batch * len;
  r.sequence_index.resize(static_cast<size_t>(n));
  r.cu_seqlens.push_back(0);
  int64_t seq = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (i % len == 0 || position_ids[i] - position_ids[i - 1] != 1) {
      if (i > 0) r.cu_seqlens.push_back(i);
      ++seq;
    }
    r.sequence_index[static_cast<size_t>(i)] = seq;
  }
  if (n > 0) r.cu_seqlens.push_back(n);
  for (size_t i = 1; i < r.cu_seqlens.size(); ++i) {
    r.max_seqlen = std::max(r.max_seqlen, r.cu_seqlens[i] - r.cu_seqlens[i - 1]);
  }
  *out = std::move(r);
  return Status::Ok();
}

Status unpad(const uint8_t* padding_mask, int64_t batch, int64_t len, Unpadded* out) {
  if (out == nullptr || batch < 0 || len < 0 || (batch * len > 0 && padding_mask == nullptr)) {
    return Status::InvalidArgument("unpad: bad arguments");
  }
  Unpadded r;
  r.cu_seqlens.assign(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    const uint8_t* row = padding_mask + b * len;
    for (int64_t t = 0; t < len; ++t) {
      if (row[t] != 0) r.indices.push_back(b * len + t);
    }
    const int64_t count = static_cast<int64_t>(r.indices.size()) - r.cu_seqlens.back();
    r.cu_seqlens.push_back(static_cast<int64_t>(r.indices.size()));
    r.max_seqlen = std::max(r.max_seqlen, count);
  }
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
