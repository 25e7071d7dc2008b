// What every host mask builder (kernels/cpu/, kernels/torch/) shares because it does not depend on
// how the masks are computed: the checks of MaskParams, the layer types the contract knows, and
// layer_masks() composed from the builder's own token_validity, build_bool_mask and mask_needed
// (kernels/common/mask_params.h). Written once, so the builders cannot drift apart on them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_params.h"

namespace deltacheck::kernels {

// The cache position of row b's first query.
inline int64_t mask_row_offset(const MaskParams& p, int64_t b) {
  return p.q_offsets ? p.q_offsets[b] : p.q_offset;
}

// The contract's consistency checks of `p` (sizes, offsets, rules), as every builder's validate()
// starts; a builder may add checks of its own fields after them.
inline Status validate_mask_params(const MaskParams& p) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("mask params: " + m); };
  if (p.batch < 0 || p.q_len < 0 || p.kv_length < 0) {
    return bad("batch, q_len and kv_length must be >= 0");
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t off = mask_row_offset(p, b);
    if (off < 0 || off + p.q_len > p.kv_length) {
      return bad("row " + std::to_string(b) + ": q_offset " + std::to_string(off) + " + q_len " +
                 std::to_string(p.q_len) + " does not fit kv_length " +
                 std::to_string(p.kv_length));
    }
  }
  if (p.sliding_window < 0 || p.chunk_size < 0) return bad("sliding_window and chunk_size >= 0");
  if (!p.causal && (p.sliding_window > 0 || p.chunk_size > 0)) {
    return bad("sliding_window and chunk_size are defined for causal masks only");
  }
  if (p.position_id_rows < 1) return bad("position_id_rows must be >= 1");
  return Status::Ok();
}

// linear_attention and the per-backbone names Transformers PR #46738 gave it: one mask rule.
inline bool is_linear_layer_type(const std::string& t) {
  return t == "linear_attention" || t == "linear_attention_mamba" ||
         t == "linear_attention_mamba2" || t == "linear_attention_gated_delta_net";
}

inline bool is_known_layer_type(const std::string& t) {
  return t == "full_attention" || t == "sliding_attention" || t == "chunked_attention" ||
         is_linear_layer_type(t);
}

// layer_masks(types, p, out) of the contract over a builder's functions: Builder has static
// validate, token_validity, build_bool_mask and mask_needed with the contract's signatures.
template <typename Builder>
Status compose_layer_masks(const std::vector<std::string>& layer_types, const MaskParams& p,
                           LayerMasks* out) {
  if (out == nullptr) return Status::InvalidArgument("mask builder: output is null");
  *out = LayerMasks{};
  Status s = Builder::validate(p);
  if (!s.ok()) return s;
  // Every type is checked before anything is built: a model with one bad layer gets no masks.
  for (size_t i = 0; i < layer_types.size(); ++i) {
    const std::string& t = layer_types[i];
    const std::string where = " at layer " + std::to_string(i);
    if (!is_known_layer_type(t)) {
      return Status::InvalidArgument("unknown layer type '" + t + "'" + where);
    }
    if (t == "sliding_attention" && p.sliding_window <= 0) {
      return Status::InvalidArgument("layer type 'sliding_attention'" + where +
                                     " needs a sliding_window > 0");
    }
    if (t == "chunked_attention" && p.chunk_size <= 0) {
      return Status::InvalidArgument("layer type 'chunked_attention'" + where +
                                     " needs a chunk_size > 0");
    }
  }
  LayerMasks result;
  for (const std::string& t : layer_types) {
    auto found = std::find_if(result.masks.begin(), result.masks.end(),
                              [&](const LayerMask& m) { return m.layer_type == t; });
    result.layer_to_mask.push_back(found - result.masks.begin());
    if (found != result.masks.end()) continue;

    LayerMask m;
    m.layer_type = t;
    if (is_linear_layer_type(t)) {
      std::vector<uint8_t> valid(static_cast<size_t>(p.batch * p.q_len));
      s = Builder::token_validity(p, valid.data());
      if (!s.ok()) return s;
      const bool all_valid = std::all_of(valid.begin(), valid.end(), [](uint8_t v) { return v; });
      bool decoding = p.q_len == 1;
      for (int64_t b = 0; b < p.batch; ++b) decoding = decoding && mask_row_offset(p, b) > 0;
      m.kind = (all_valid || decoding) ? LayerMaskKind::kNone : LayerMaskKind::kValidity;
      if (m.kind == LayerMaskKind::kValidity) m.mask = std::move(valid);
    } else {
      MaskParams lp = p;
      lp.causal = true;
      lp.sliding_window = t == "sliding_attention" ? p.sliding_window : 0;
      lp.chunk_size = t == "chunked_attention" ? p.chunk_size : 0;
      m.kind = LayerMaskKind::kAttention;
      m.mask.resize(static_cast<size_t>(p.batch * p.q_len * p.kv_length));
      s = Builder::build_bool_mask(lp, m.mask.data());
      if (!s.ok()) return s;
      s = Builder::mask_needed(lp, &m.needed);
      if (!s.ok()) return s;
    }
    result.masks.push_back(std::move(m));
  }
  *out = std::move(result);
  return Status::Ok();
}

}  // namespace deltacheck::kernels
