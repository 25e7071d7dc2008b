// Runs a mask, layers or segments case on one mask builder and writes the outputs the harness
// compares (ops/mask/problem.h). Every host builder has the same contract
// (kernels/common/mask_params.h), so one adapter serves all: `Api` is a builder as a type,
// DELTACHECK_MASK_BUILDER_API(CpuMaskApi, kernels::cpu) (kernels/common/mask_builder_api.h).
// A deliberately wrong builder derives from a real one and hides the function it breaks.
// What a builder returns that cannot fill the outputs (a mask of the wrong size, layer types out
// of order) is reported as kInternal "malformed ..." (verdict error); wrong values are left to
// the comparison (verdict fail); a builder's own error comes back unchanged (verdict error).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cases/tensor.h"
#include "core/half.h"
#include "core/status.h"
#include "kernels/common/mask_params.h"
#include "ops/mask/problem.h"

namespace deltacheck::backends {

using ops::mask::LayerOutputKind;
using ops::mask::mask_outputs;
using ops::mask::mask_problem;
using ops::mask::MaskProblem;

namespace mask_adapter_detail {

inline Status output(cases::TensorMap& out, const std::string& name, cases::Tensor** t) {
  *t = out.find(name);
  if (*t == nullptr) return Status::Internal("output '" + name + "' was not allocated");
  return Status::Ok();
}

template <typename Api>
kernels::AdditiveFill fill(const MaskProblem& p) {
  using Fill = kernels::AdditiveFill;
  if (p.format == "additive-inf") return Fill::kNegativeInfinity;
  if (p.dtype == cases::DType::kBF16) return Fill::kBFloat16Lowest;
  if (p.dtype == cases::DType::kF16) return Fill::kFloat16Lowest;
  return Fill::kFloat32Lowest;
}

template <typename Api>
Status run_mask(const MaskProblem& p, cases::TensorMap& out) {
  const kernels::MaskParams b = ops::mask::mask_params(p);
  cases::Tensor *mask = nullptr, *needed = nullptr, *rows = nullptr;
  for (Status s : {output(out, "mask", &mask), output(out, "needed", &needed),
                   output(out, "fully_masked", &rows)})
    if (!s.ok()) return s;
  Status s;
  if (p.format == "bool") {
    s = Api::build_bool_mask(b, mask->as<uint8_t>());
  } else if (mask->dtype() == cases::DType::kF32) {
    s = Api::build_additive_mask(b, fill<Api>(p), mask->as<float>());
  } else {
    // Builders produce fp32; the mask is held in the model dtype (the fill values are exact in
    // their own dtype, so the conversion is exact for a right builder).
    std::vector<float> f32(static_cast<size_t>(mask->numel()));
    s = Api::build_additive_mask(b, fill<Api>(p), f32.data());
    const DType st = cases::kernel_dtype(mask->dtype());
    if (s.ok())
      for (int64_t i = 0; i < mask->numel(); ++i) store_from_float(mask->data(), st, i, f32[i]);
  }
  if (!s.ok()) return s;
  bool is_needed = true;
  if (s = Api::mask_needed(b, &is_needed); !s.ok()) return s;
  needed->as<uint8_t>()[0] = is_needed ? 1 : 0;
  return Api::fully_masked_rows(b, rows->as<uint8_t>());
}

template <typename Api>
Status run_layers(const MaskProblem& p, cases::TensorMap& out) {
  using Kind = kernels::LayerMaskKind;
  kernels::LayerMasks lm;
  if (Status s = Api::layer_masks(p.layer_types, ops::mask::mask_params(p), &lm); !s.ok()) return s;
  if (lm.masks.size() != p.distinct_types.size() || lm.layer_to_mask.size() != p.layer_types.size())
    return Status::Internal(fmt::format(
        "malformed layer masks: {} masks for {} distinct layer types, {} mapping entries for {} "
        "layers",
        lm.masks.size(), p.distinct_types.size(), lm.layer_to_mask.size(), p.layer_types.size()));
  cases::Tensor *kinds = nullptr, *needed = nullptr, *mapping = nullptr;
  for (Status s : {output(out, "mask_kind", &kinds), output(out, "needed", &needed),
                   output(out, "layer_to_mask", &mapping)})
    if (!s.ok()) return s;
  for (size_t i = 0; i < lm.masks.size(); ++i) {
    const auto& m = lm.masks[i];
    if (m.layer_type != p.distinct_types[i])
      return Status::Internal(
          fmt::format("malformed layer masks: mask {} is for '{}', expected '{}'", i, m.layer_type,
                      p.distinct_types[i]));
    cases::Tensor* t = nullptr;
    if (Status s = output(out, m.layer_type, &t); !s.ok()) return s;
    LayerOutputKind kind = LayerOutputKind::kAttention;
    if (m.kind == Kind::kValidity) kind = LayerOutputKind::kValidity;
    if (m.kind == Kind::kNone) kind = LayerOutputKind::kNone;
    if (m.kind == Kind::kNone) {
      std::memset(t->data(), 1, static_cast<size_t>(t->numel()));  // no mask: every token valid
    } else if (static_cast<int64_t>(m.mask.size()) == t->numel()) {
      std::memcpy(t->data(), m.mask.data(), m.mask.size());
    } else {
      return Status::Internal(
          fmt::format("malformed layer masks: '{}' mask has {} elements, expected {} ({})",
                      m.layer_type, m.mask.size(), t->numel(), cases::shape_string(t->shape())));
    }
    kinds->as<uint8_t>()[i] = static_cast<uint8_t>(kind);
    needed->as<uint8_t>()[i] = m.needed ? 1 : 0;
  }
  std::copy(lm.layer_to_mask.begin(), lm.layer_to_mask.end(), mapping->as<int64_t>());
  return Status::Ok();
}

template <typename Api>
Status run_segments(const MaskProblem& p, cases::TensorMap& out) {
  const int64_t n = p.rows * p.len;
  if (p.source == "cu") {
    cases::Tensor* index = nullptr;
    if (Status s = output(out, "sequence_index", &index); !s.ok()) return s;
    return Api::sequence_index_from_cu_seqlens(p.cu_seqlens, p.num_seqs, index->as<int64_t>());
  }
  cases::Tensor *cu = nullptr, *max_len = nullptr;
  for (Status s : {output(out, "cu_seqlens", &cu), output(out, "max_seqlen", &max_len)})
    if (!s.ok()) return s;
  if (p.source == "position") {
    kernels::PackedSegments ps;
    if (Status s = Api::segments_from_position_ids(p.segment_positions, p.rows, p.len, &ps);
        !s.ok())
      return s;
    if (static_cast<int64_t>(ps.sequence_index.size()) != n || ps.cu_seqlens.empty() ||
        static_cast<int64_t>(ps.cu_seqlens.size()) > n + 1)
      return Status::Internal(fmt::format(
          "malformed segments: {} sequence indices for {} tokens, {} cu_seqlens entries",
          ps.sequence_index.size(), n, ps.cu_seqlens.size()));
    cases::Tensor *num = nullptr, *index = nullptr;
    for (Status s : {output(out, "num_seqs", &num), output(out, "sequence_index", &index)})
      if (!s.ok()) return s;
    int64_t* c = cu->as<int64_t>();
    std::copy(ps.cu_seqlens.begin(), ps.cu_seqlens.end(), c);
    std::fill(c + ps.cu_seqlens.size(), c + n + 1, n);  // fixed size: trailing empty sequences
    num->as<int64_t>()[0] = static_cast<int64_t>(ps.cu_seqlens.size()) - 1;
    std::copy(ps.sequence_index.begin(), ps.sequence_index.end(), index->as<int64_t>());
    max_len->as<int64_t>()[0] = ps.max_seqlen;
    return Status::Ok();
  }
  kernels::Unpadded u;
  if (Status s = Api::unpad(p.segment_padding, p.rows, p.len, &u); !s.ok()) return s;
  if (static_cast<int64_t>(u.indices.size()) > n ||
      static_cast<int64_t>(u.cu_seqlens.size()) != p.rows + 1)
    return Status::Internal(
        fmt::format("malformed unpad: {} indices for {} tokens, {} cu_seqlens "
                    "entries for {} rows",
                    u.indices.size(), n, u.cu_seqlens.size(), p.rows));
  cases::Tensor* indices = nullptr;
  if (Status s = output(out, "indices", &indices); !s.ok()) return s;
  int64_t* ix = indices->as<int64_t>();
  std::copy(u.indices.begin(), u.indices.end(), ix);
  std::fill(ix + u.indices.size(), ix + n, int64_t{-1});  // fixed size: no token
  std::copy(u.cu_seqlens.begin(), u.cu_seqlens.end(), cu->as<int64_t>());
  max_len->as<int64_t>()[0] = u.max_seqlen;
  return Status::Ok();
}

}  // namespace mask_adapter_detail

// Runs the case's op on the builder `Api`, writing every output of mask_outputs(c).
template <typename Api>
Status run_mask_case_with(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) {
  MaskProblem p;
  try {
    p = mask_problem(c, in);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  if (p.op == "mask") return mask_adapter_detail::run_mask<Api>(p, out);
  if (p.op == "layers") return mask_adapter_detail::run_layers<Api>(p, out);
  if (p.op == "segments") return mask_adapter_detail::run_segments<Api>(p, out);
  return Status::InvalidArgument("not a mask op: '" + c.op() + "'");
}

}  // namespace deltacheck::backends
