// LibTorch mask builder: each rule is an index comparison broadcast over [B, 1, q, kv] and the
// rules are combined with &, as Transformers' masking_utils does it (sdpa_mask without vmap).
#include "kernels/torch/mask_builder.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

#include "kernels/common/mask_builder_api.h"
#include "kernels/common/mask_builder_common.h"

namespace deltacheck::kernels::torch {
namespace {

// Errors thrown inside ATen (c10::Error is a std::exception) become a status instead of escaping.
template <typename Fn>
Status guarded(const char* who, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Status::Internal(std::string(who) + ": " + e.what());
  }
}

Status null_output(const void* out, int64_t elements) {
  if (elements > 0 && out == nullptr)
    return Status::InvalidArgument("mask builder: output is null");
  return Status::Ok();
}

// A tensor holding a copy of host memory (from_blob needs a mutable pointer; we never write).
template <typename T>
at::Tensor copy_in(const T* data, at::IntArrayRef shape, at::ScalarType type) {
  return at::from_blob(const_cast<T*>(data), shape, type).clone();
}

// The inputs as tensors: per-row offsets [B], padding [B, kv] (bool, undefined when absent) and
// row 0 of the position ids [B, q] (undefined when absent).
struct Inputs {
  at::Tensor offsets;
  at::Tensor padding;
  at::Tensor positions;
};

Inputs tensors_of(const MaskParams& p) {
  Inputs in;
  in.offsets = p.q_offsets ? copy_in(p.q_offsets, {p.batch}, at::kLong)
                           : at::full({p.batch}, p.q_offset, at::kLong);
  if (p.padding_mask && p.batch * p.kv_length > 0) {
    in.padding = copy_in(p.padding_mask, {p.batch, p.kv_length}, at::kByte).ne(0);
  }
  if (p.position_ids && p.batch * p.q_len > 0) {
    in.positions = copy_in(p.position_ids, {p.batch, p.q_len}, at::kLong);  // row 0
  }
  return in;
}

// Transformers' find_packed_sequence_indices: diff against the previous position (the first token
// compares with itself - 1), every step that is not +1 opens a segment, cumsum numbers them.
at::Tensor segment_ids(const at::Tensor& positions) {
  const at::Tensor first = positions.narrow(1, 0, 1) - 1;
  const at::Tensor previous = at::cat({first, positions.narrow(1, 0, positions.size(1) - 1)}, 1);
  return (positions - previous).ne(1).to(at::kLong).cumsum(1);
}

// Leading padding per row: positions where the running count of real tokens is still 0.
at::Tensor left_padding(const Inputs& in, int64_t batch) {
  if (!in.padding.defined()) return at::zeros({batch}, at::kLong);
  return in.padding.to(at::kLong).cumsum(-1).eq(0).sum(-1);
}

// The boolean mask [B, 1, q, kv] (requires B, q, kv > 0).
at::Tensor bool_mask(const MaskParams& p, const Inputs& in) {
  const int64_t B = p.batch, Q = p.q_len, KV = p.kv_length;
  const at::Tensor kv_idx = at::arange(KV, at::kLong).view({1, 1, 1, KV});
  const at::Tensor q_abs =
      (at::arange(Q, at::kLong).view({1, Q}) + in.offsets.view({B, 1})).view({B, 1, Q, 1});
  at::Tensor mask = at::ones({1, 1, 1, 1}, at::kBool);
  if (p.causal) mask = mask & kv_idx.le(q_abs);
  if (p.sliding_window > 0) mask = mask & kv_idx.gt(q_abs - p.sliding_window);
  if (p.chunk_size > 0) {
    const at::Tensor lp = left_padding(in, B).view({B, 1, 1, 1});
    const at::Tensor kv_chunk = at::div(kv_idx - lp, p.chunk_size, "floor");
    const at::Tensor q_chunk = at::div(q_abs - lp, p.chunk_size, "floor");
    mask = mask & kv_chunk.eq(q_chunk);
  }
  if (in.padding.defined()) mask = mask & in.padding.view({B, 1, 1, KV});
  if (in.positions.defined()) {
    const at::Tensor seg = segment_ids(in.positions);  // [B, Q]
    // Key kv of row b is new token kv - offset[b]; before it the cached prefix (segment 0), after
    // it unwritten slots (segment -1).
    const at::Tensor rel = at::arange(KV, at::kLong).view({1, KV}) - in.offsets.view({B, 1});
    const at::Tensor key_seg =
        seg.gather(1, rel.clamp(0, Q - 1)).masked_fill(rel.lt(0), 0).masked_fill(rel.ge(Q), -1);
    mask = mask & seg.view({B, 1, Q, 1}).eq(key_seg.view({B, 1, 1, KV}));
  }
  return mask.expand({B, 1, Q, KV}).contiguous();
}

float fill_value(AdditiveFill fill) {
  switch (fill) {
    case AdditiveFill::kFloat32Lowest:
      return std::numeric_limits<float>::lowest();
    case AdditiveFill::kBFloat16Lowest:
      return static_cast<float>(std::numeric_limits<c10::BFloat16>::lowest());
    case AdditiveFill::kFloat16Lowest:
      return static_cast<float>(std::numeric_limits<c10::Half>::lowest());
    case AdditiveFill::kNegativeInfinity:
      return -std::numeric_limits<float>::infinity();
  }
  return 0.0f;
}

void copy_out(const at::Tensor& t, void* out) {
  const at::Tensor c = t.contiguous();
  std::memcpy(out, c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

Status validate(const MaskParams& p) { return validate_mask_params(p); }

Status build_bool_mask(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (s.ok()) s = null_output(out, p.batch * p.q_len * p.kv_length);
  if (!s.ok() || p.batch * p.q_len * p.kv_length == 0) return s;
  return guarded("build_bool_mask", [&] {
    copy_out(bool_mask(p, tensors_of(p)).to(at::kByte), out);
    return Status::Ok();
  });
}

Status build_additive_mask(const MaskParams& p, AdditiveFill fill, float* out) {
  Status s = validate(p);
  if (s.ok()) s = null_output(out, p.batch * p.q_len * p.kv_length);
  if (!s.ok() || p.batch * p.q_len * p.kv_length == 0) return s;
  return guarded("build_additive_mask", [&] {
    const at::Tensor mask = bool_mask(p, tensors_of(p));
    copy_out(at::zeros(mask.sizes(), at::kFloat).masked_fill(mask.logical_not(), fill_value(fill)),
             out);
    return Status::Ok();
  });
}

Status mask_needed(const MaskParams& p, bool* needed) {
  Status s = validate(p);
  if (!s.ok()) return s;
  if (needed == nullptr) return Status::InvalidArgument("mask builder: output is null");
  return guarded("mask_needed", [&] {
    const Inputs in = tensors_of(p);
    bool need = p.static_cache || !p.causal;
    need = need || (p.sliding_window > 0 && p.kv_length >= p.sliding_window);
    need = need || (p.chunk_size > 0 && p.kv_length >= p.chunk_size);
    need = need || (in.padding.defined() && !in.padding.all().item<bool>());
    need = need || (in.positions.defined() &&
                    segment_ids(in.positions).select(1, p.q_len - 1).ne(0).any().item<bool>());
    const bool square = p.q_len == p.kv_length;
    const bool last_query =
        p.q_len == 1 && (p.batch == 0 || in.offsets.eq(p.kv_length - 1).all().item<bool>());
    *needed = need || !(square || last_query);
    return Status::Ok();
  });
}

Status fully_masked_rows(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (s.ok()) s = null_output(out, p.batch * p.q_len);
  if (!s.ok() || p.batch * p.q_len == 0) return s;
  if (p.kv_length == 0) {
    std::memset(out, 1, static_cast<size_t>(p.batch * p.q_len));
    return Status::Ok();
  }
  return guarded("fully_masked_rows", [&] {
    copy_out(bool_mask(p, tensors_of(p)).any(-1).logical_not().to(at::kByte), out);
    return Status::Ok();
  });
}

Status token_validity(const MaskParams& p, uint8_t* out) {
  Status s = validate(p);
  if (s.ok()) s = null_output(out, p.batch * p.q_len);
  if (!s.ok() || p.batch * p.q_len == 0) return s;
  return guarded("token_validity", [&] {
    const Inputs in = tensors_of(p);
    if (!in.padding.defined()) {
      std::memset(out, 1, static_cast<size_t>(p.batch * p.q_len));
      return Status::Ok();
    }
    const at::Tensor q_abs =
        at::arange(p.q_len, at::kLong).view({1, p.q_len}) + in.offsets.view({p.batch, 1});
    copy_out(in.padding.gather(1, q_abs).to(at::kByte), out);
    return Status::Ok();
  });
}

namespace {
DELTACHECK_MASK_BUILDER_API(Builder, ::deltacheck::kernels::torch);
}  // namespace

Status layer_masks(const std::vector<std::string>& layer_types, const MaskParams& p,
                   LayerMasks* out) {
  return compose_layer_masks<Builder>(layer_types, p, out);
}

Status sequence_index_from_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, int64_t* out) {
  if (cu_seqlens == nullptr || num_seqs < 0) {
    return Status::InvalidArgument("cu_seqlens: null or negative num_seqs");
  }
  return guarded("sequence_index_from_cu_seqlens", [&] {
    const at::Tensor cu = copy_in(cu_seqlens, {num_seqs + 1}, at::kLong);
    const at::Tensor lengths = cu.narrow(0, 1, num_seqs) - cu.narrow(0, 0, num_seqs);
    if (cu[0].item<int64_t>() != 0) return Status::InvalidArgument("cu_seqlens must start at 0");
    if (num_seqs > 0 && lengths.lt(0).any().item<bool>()) {
      return Status::InvalidArgument("cu_seqlens must be non-decreasing");
    }
    const int64_t total = cu[num_seqs].item<int64_t>();
    if (total == 0) return Status::Ok();
    if (out == nullptr) return Status::InvalidArgument("mask builder: output is null");
    copy_out(at::repeat_interleave(at::arange(num_seqs, at::kLong), lengths), out);
    return Status::Ok();
  });
}

Status segments_from_position_ids(const int64_t* position_ids, int64_t batch, int64_t len,
                                  PackedSegments* out) {
  if (out == nullptr || batch < 0 || len < 0 || (batch * len > 0 && position_ids == nullptr)) {
    return Status::InvalidArgument("segments_from_position_ids: bad arguments");
  }
  *out = PackedSegments{};
  out->cu_seqlens.push_back(0);
  if (batch * len == 0) return Status::Ok();
  return guarded("segments_from_position_ids", [&] {
    const int64_t n = batch * len;
    const at::Tensor pos = copy_in(position_ids, {batch, len}, at::kLong);
    // Steps that are not +1 open a sequence. Each row's first token is compared with itself (a step
    // of 0), so every row start opens one too: no sequence spans two rows.
    const at::Tensor previous = at::cat({pos.narrow(1, 0, 1), pos.narrow(1, 0, len - 1)}, 1);
    const at::Tensor starts = (pos - previous).ne(1).flatten();
    const at::Tensor begins = at::nonzero(starts).flatten();
    const at::Tensor cu = at::cat({begins, at::full({1}, n, at::kLong)});
    const int64_t count = begins.size(0);
    out->cu_seqlens = to_vector(cu);
    out->max_seqlen = (cu.narrow(0, 1, count) - cu.narrow(0, 0, count)).max().item<int64_t>();
    out->sequence_index = to_vector(starts.to(at::kLong).cumsum(0) - 1);
    return Status::Ok();
  });
}

Status unpad(const uint8_t* padding_mask, int64_t batch, int64_t len, Unpadded* out) {
  if (out == nullptr || batch < 0 || len < 0 || (batch * len > 0 && padding_mask == nullptr)) {
    return Status::InvalidArgument("unpad: bad arguments");
  }
  *out = Unpadded{};
  if (batch * len == 0) {
    out->cu_seqlens.assign(static_cast<size_t>(batch + 1), 0);
    return Status::Ok();
  }
  return guarded("unpad", [&] {
    // flash-attention's _get_unpad_data: nonzero of the flattened mask, cumsum of row lengths.
    const at::Tensor real = copy_in(padding_mask, {batch, len}, at::kByte).ne(0);
    const at::Tensor seqlens = real.sum(1, /*keepdim=*/false, at::kLong);
    out->indices = to_vector(at::nonzero(real.flatten()).flatten());
    out->cu_seqlens = to_vector(at::cat({at::zeros({1}, at::kLong), seqlens.cumsum(0)}));
    out->max_seqlen = seqlens.max().item<int64_t>();
    return Status::Ok();
  });
}

}  // namespace deltacheck::kernels::torch
