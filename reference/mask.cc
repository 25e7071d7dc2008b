// Attention-mask construction from the definition, element by element (see mask.h).
#include "reference/mask.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace deltacheck::reference {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("mask spec: " + what);
}

// Python's //: rounds toward negative infinity, so left-padding queries land in negative chunks.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t offset_of(const MaskSpec& spec, int64_t b) {
  if (spec.q_offset.empty()) return 0;
  if (spec.q_offset.size() == 1) return spec.q_offset[0];
  return spec.q_offset[static_cast<size_t>(b)];
}

bool key_is_real(const MaskSpec& spec, int64_t b, int64_t kv) {
  if (spec.padding_mask.empty()) return true;
  return spec.padding_mask[static_cast<size_t>(b * spec.kv_length + kv)] != 0;
}

int64_t position_id(const MaskSpec& spec, int64_t b, int64_t q) {
  return spec.position_ids[static_cast<size_t>(b * spec.q_len + q)];  // row 0 of [rows, B, q_len]
}

// Segment of new token q in row b: count the places before it where the position did not step by 1.
int64_t query_segment(const MaskSpec& spec, int64_t b, int64_t q) {
  int64_t segment = 0;
  for (int64_t i = 1; i <= q; ++i) {
    if (position_id(spec, b, i) - position_id(spec, b, i - 1) != 1) ++segment;
  }
  return segment;
}

// Everything the rules need that depends on a whole row, computed once per spec for the builders.
struct RowFacts {
  std::vector<int64_t> left_padding;  // [B]
  std::vector<int64_t> segment;       // [B, q_len], empty without position_ids
};

RowFacts row_facts(const MaskSpec& spec) {
  RowFacts f;
  for (int64_t b = 0; b < spec.batch; ++b) f.left_padding.push_back(left_padding(spec, b));
  if (!spec.position_ids.empty()) f.segment = packed_segment_ids(spec);
  return f;
}

int64_t key_segment(const MaskSpec& spec, const RowFacts& f, int64_t b, int64_t kv) {
  int64_t offset = offset_of(spec, b);
  if (kv < offset) return 0;
  if (kv < offset + spec.q_len) return f.segment[static_cast<size_t>(b * spec.q_len + kv - offset)];
  return -1;
}

// The first rule, in the documented order, that denies (b, q, kv); kAllowed when none does.
MaskRule first_denying_rule(const MaskSpec& spec, const RowFacts& f, int64_t b, int64_t q,
                            int64_t kv) {
  const int64_t q_abs = query_position(spec, b, q);
  if (spec.causal && !(kv <= q_abs)) return MaskRule::kCausal;
  if (spec.sliding_window > 0 && !(kv > q_abs - spec.sliding_window)) return MaskRule::kWindow;
  if (spec.chunk_size > 0) {
    const int64_t lp = f.left_padding[static_cast<size_t>(b)];
    if (floor_div(kv - lp, spec.chunk_size) != floor_div(q_abs - lp, spec.chunk_size)) {
      return MaskRule::kChunk;
    }
  }
  if (!key_is_real(spec, b, kv)) return MaskRule::kPadding;
  if (!spec.position_ids.empty() &&
      key_segment(spec, f, b, kv) != f.segment[static_cast<size_t>(b * spec.q_len + q)]) {
    return MaskRule::kSegment;
  }
  return MaskRule::kAllowed;
}

// The numbers behind a decision, for a person reading a mismatch report.
std::string describe(const MaskSpec& spec, const RowFacts& f, int64_t b, int64_t q, int64_t kv,
                     MaskRule rule) {
  const int64_t q_abs = query_position(spec, b, q);
  std::ostringstream s;
  s << mask_rule_name(rule) << ": ";
  switch (rule) {
    case MaskRule::kAllowed:
      s << "kv " << kv << " visible from q_abs " << q_abs;
      break;
    case MaskRule::kCausal:
      s << "kv " << kv << " > q_abs " << q_abs;
      break;
    case MaskRule::kWindow:
      s << "kv " << kv << " <= q_abs " << q_abs << " - W " << spec.sliding_window;
      break;
    case MaskRule::kChunk: {
      const int64_t lp = f.left_padding[static_cast<size_t>(b)];
      s << "kv " << kv << " in chunk " << floor_div(kv - lp, spec.chunk_size) << ", q_abs " << q_abs
        << " in chunk " << floor_div(q_abs - lp, spec.chunk_size) << " (C " << spec.chunk_size
        << ", left padding " << lp << ")";
      break;
    }
    case MaskRule::kPadding:
      s << "padding_mask[" << b << ", " << kv << "] == 0";
      break;
    case MaskRule::kSegment:
      s << "kv " << kv << " in segment " << key_segment(spec, f, b, kv) << ", query " << q
        << " in segment " << f.segment[static_cast<size_t>(b * spec.q_len + q)];
      break;
  }
  return s.str();
}

void check_element(const MaskSpec& spec, int64_t b, int64_t q, int64_t kv) {
  if (b < 0 || b >= spec.batch || q < 0 || q >= spec.q_len || kv < 0 || kv >= spec.kv_length) {
    fail("element (" + std::to_string(b) + ", " + std::to_string(q) + ", " + std::to_string(kv) +
         ") outside [" + std::to_string(spec.batch) + ", " + std::to_string(spec.q_len) + ", " +
         std::to_string(spec.kv_length) + ")");
  }
}

}  // namespace

void validate(const MaskSpec& spec) {
  if (spec.batch < 0 || spec.q_len < 0 || spec.kv_length < 0) {
    fail("batch, q_len and kv_length must be >= 0");
  }
  const size_t batch = static_cast<size_t>(spec.batch);
  if (!spec.q_offset.empty() && spec.q_offset.size() != 1 && spec.q_offset.size() != batch) {
    fail("q_offset has " + std::to_string(spec.q_offset.size()) + " entries, expected 0, 1 or " +
         std::to_string(spec.batch));
  }
  for (int64_t b = 0; b < spec.batch; ++b) {
    const int64_t offset = offset_of(spec, b);
    if (offset < 0 || offset + spec.q_len > spec.kv_length) {
      fail("row " + std::to_string(b) + ": q_offset " + std::to_string(offset) + " + q_len " +
           std::to_string(spec.q_len) + " does not fit kv_length " +
           std::to_string(spec.kv_length));
    }
  }
  if (spec.sliding_window < 0 || spec.chunk_size < 0) fail("sliding_window and chunk_size >= 0");
  if (!spec.causal && (spec.sliding_window > 0 || spec.chunk_size > 0)) {
    fail("sliding_window and chunk_size are defined for causal masks only");
  }
  if (!spec.padding_mask.empty() && spec.padding_mask.size() != batch * spec.kv_length) {
    fail("padding_mask has " + std::to_string(spec.padding_mask.size()) +
         " entries, expected batch * kv_length = " + std::to_string(spec.batch * spec.kv_length));
  }
  if (spec.position_id_rows < 1) fail("position_id_rows must be >= 1");
  if (!spec.position_ids.empty() &&
      spec.position_ids.size() != static_cast<size_t>(spec.position_id_rows) * batch * spec.q_len) {
    fail("position_ids has " + std::to_string(spec.position_ids.size()) +
         " entries, expected position_id_rows * batch * q_len = " +
         std::to_string(spec.position_id_rows * spec.batch * spec.q_len));
  }
}

int64_t query_position(const MaskSpec& spec, int64_t b, int64_t q) {
  return offset_of(spec, b) + q;
}

int64_t left_padding(const MaskSpec& spec, int64_t b) {
  int64_t count = 0;
  while (count < spec.kv_length && !key_is_real(spec, b, count)) ++count;
  return count;
}

std::vector<int64_t> packed_segment_ids(const MaskSpec& spec) {
  std::vector<int64_t> out(static_cast<size_t>(spec.batch * spec.q_len), 0);
  if (spec.position_ids.empty()) return out;
  for (int64_t b = 0; b < spec.batch; ++b) {
    for (int64_t q = 0; q < spec.q_len; ++q) {
      out[static_cast<size_t>(b * spec.q_len + q)] = query_segment(spec, b, q);
    }
  }
  return out;
}

bool has_packing(const MaskSpec& spec) {
  if (spec.position_ids.empty()) return false;
  for (int64_t b = 0; b < spec.batch; ++b) {
    if (spec.q_len > 0 && query_segment(spec, b, spec.q_len - 1) != 0) return true;
  }
  return false;
}

const char* mask_rule_name(MaskRule rule) {
  switch (rule) {
    case MaskRule::kAllowed:
      return "allowed";
    case MaskRule::kCausal:
      return "causal";
    case MaskRule::kWindow:
      return "window";
    case MaskRule::kChunk:
      return "chunk";
    case MaskRule::kPadding:
      return "padding";
    case MaskRule::kSegment:
      return "segment";
  }
  return "?";
}

bool allowed(const MaskSpec& spec, int64_t b, int64_t q, int64_t kv) {
  return explain(spec, b, q, kv).allowed;
}

MaskDecision explain(const MaskSpec& spec, int64_t b, int64_t q, int64_t kv) {
  validate(spec);
  check_element(spec, b, q, kv);
  const RowFacts f = row_facts(spec);
  MaskDecision d;
  d.rule = first_denying_rule(spec, f, b, q, kv);
  d.allowed = d.rule == MaskRule::kAllowed;
  d.detail = describe(spec, f, b, q, kv, d.rule);
  return d;
}

std::vector<uint8_t> build_bool_mask(const MaskSpec& spec) {
  validate(spec);
  const RowFacts f = row_facts(spec);
  std::vector<uint8_t> out(static_cast<size_t>(spec.batch * spec.q_len * spec.kv_length));
  size_t i = 0;
  for (int64_t b = 0; b < spec.batch; ++b) {
    for (int64_t q = 0; q < spec.q_len; ++q) {
      for (int64_t kv = 0; kv < spec.kv_length; ++kv) {
        out[i++] = first_denying_rule(spec, f, b, q, kv) == MaskRule::kAllowed ? 1 : 0;
      }
    }
  }
  return out;
}

float additive_fill_value(AdditiveFill fill) {
  switch (fill) {
    case AdditiveFill::kFloat32Lowest:
      return std::numeric_limits<float>::lowest();
    case AdditiveFill::kBFloat16Lowest: {
      const uint32_t bits = 0xff7f0000u;  // sign 1, exponent 254, 7 mantissa bits set
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

std::vector<float> build_additive_mask(const MaskSpec& spec, AdditiveFill fill) {
  const std::vector<uint8_t> mask = build_bool_mask(spec);
  const float denied = additive_fill_value(fill);
  std::vector<float> out(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) out[i] = mask[i] ? 0.0f : denied;
  return out;
}

bool mask_needed(const MaskSpec& spec) {
  validate(spec);
  if (spec.static_cache || !spec.causal) return true;
  if (spec.sliding_window > 0 && spec.kv_length >= spec.sliding_window) return true;
  if (spec.chunk_size > 0 && spec.kv_length >= spec.chunk_size) return true;
  for (uint8_t real : spec.padding_mask) {
    if (real == 0) return true;
  }
  if (has_packing(spec)) return true;
  bool square = spec.q_len == spec.kv_length;
  bool last_query = spec.q_len == 1;
  for (int64_t b = 0; b < spec.batch; ++b) {
    square = square && offset_of(spec, b) == 0;
    last_query = last_query && offset_of(spec, b) == spec.kv_length - 1;
  }
  return !(square || last_query);
}

std::vector<uint8_t> fully_masked_rows(const MaskSpec& spec) {
  const std::vector<uint8_t> mask = build_bool_mask(spec);
  std::vector<uint8_t> out(static_cast<size_t>(spec.batch * spec.q_len));
  for (size_t row = 0; row < out.size(); ++row) {
    bool any = false;
    for (int64_t kv = 0; kv < spec.kv_length; ++kv) {
      any = any || mask[row * static_cast<size_t>(spec.kv_length) + static_cast<size_t>(kv)] != 0;
    }
    out[row] = any ? 0 : 1;
  }
  return out;
}

std::vector<uint8_t> token_validity(const MaskSpec& spec) {
  validate(spec);
  std::vector<uint8_t> out(static_cast<size_t>(spec.batch * spec.q_len));
  for (int64_t b = 0; b < spec.batch; ++b) {
    for (int64_t q = 0; q < spec.q_len; ++q) {
      out[static_cast<size_t>(b * spec.q_len + q)] =
          key_is_real(spec, b, query_position(spec, b, q)) ? 1 : 0;
    }
  }
  return out;
}

const char* layer_mask_kind_name(LayerMaskKind kind) {
  switch (kind) {
    case LayerMaskKind::kAttention:
      return "attention";
    case LayerMaskKind::kValidity:
      return "validity";
    case LayerMaskKind::kNone:
      return "none";
  }
  return "?";
}

bool is_linear_attention_type(const std::string& layer_type) {
  return layer_type == "linear_attention" || layer_type == "linear_attention_mamba" ||
         layer_type == "linear_attention_mamba2" ||
         layer_type == "linear_attention_gated_delta_net";
}

LayerMasks layer_masks(const std::vector<std::string>& layer_types, const MaskSpec& spec) {
  validate(spec);
  LayerMasks out;
  for (size_t layer = 0; layer < layer_types.size(); ++layer) {
    const std::string& type = layer_types[layer];
    const std::string where = " at layer " + std::to_string(layer);
    if (type != "full_attention" && type != "sliding_attention" && type != "chunked_attention" &&
        !is_linear_attention_type(type)) {
      throw std::invalid_argument("unknown layer type '" + type + "'" + where);
    }
    if (type == "sliding_attention" && spec.sliding_window <= 0) {
      throw std::invalid_argument("layer type 'sliding_attention'" + where +
                                  " needs a sliding_window > 0");
    }
    if (type == "chunked_attention" && spec.chunk_size <= 0) {
      throw std::invalid_argument("layer type 'chunked_attention'" + where +
                                  " needs a chunk_size > 0");
    }
  }
  for (const std::string& type : layer_types) {
    size_t index = 0;
    while (index < out.masks.size() && out.masks[index].layer_type != type) ++index;
    out.layer_to_mask.push_back(static_cast<int64_t>(index));
    if (index < out.masks.size()) continue;

    LayerMask m;
    m.layer_type = type;
    if (is_linear_attention_type(type)) {
      m.needed = false;
      std::vector<uint8_t> valid = token_validity(spec);
      bool all_valid = true;
      for (uint8_t v : valid) all_valid = all_valid && v != 0;
      bool decoding = spec.q_len == 1;
      for (int64_t b = 0; b < spec.batch; ++b) decoding = decoding && offset_of(spec, b) > 0;
      if (all_valid || decoding) {
        m.kind = LayerMaskKind::kNone;
      } else {
        m.kind = LayerMaskKind::kValidity;
        m.mask = std::move(valid);
      }
    } else {
      MaskSpec layer_spec = spec;
      layer_spec.causal = true;
      layer_spec.sliding_window = type == "sliding_attention" ? spec.sliding_window : 0;
      layer_spec.chunk_size = type == "chunked_attention" ? spec.chunk_size : 0;
      m.kind = LayerMaskKind::kAttention;
      m.mask = build_bool_mask(layer_spec);
      m.needed = mask_needed(layer_spec);
    }
    out.masks.push_back(std::move(m));
  }
  return out;
}

std::vector<int64_t> sequence_index_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens) {
  if (cu_seqlens.empty() || cu_seqlens[0] != 0) fail("cu_seqlens must start at 0");
  std::vector<int64_t> out;
  for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i + 1] < cu_seqlens[i]) fail("cu_seqlens must be non-decreasing");
    for (int64_t t = cu_seqlens[i]; t < cu_seqlens[i + 1]; ++t) {
      out.push_back(static_cast<int64_t>(i));
    }
  }
  return out;
}

PackedSegments segments_from_position_ids(const std::vector<int64_t>& position_ids, int64_t batch,
                                          int64_t len) {
  if (batch < 0 || len < 0 || position_ids.size() != static_cast<size_t>(batch * len)) {
    fail("position_ids must hold batch * len entries");
  }
  PackedSegments out;
  out.cu_seqlens.push_back(0);
  int64_t sequence = -1;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < len; ++t) {
      const int64_t i = b * len + t;
      const bool starts =
          t == 0 ||
          position_ids[static_cast<size_t>(i)] - position_ids[static_cast<size_t>(i - 1)] != 1;
      if (starts) {
        if (sequence >= 0) out.cu_seqlens.push_back(i);
        ++sequence;
      }
      out.sequence_index.push_back(sequence);
    }
  }
  if (sequence >= 0) out.cu_seqlens.push_back(batch * len);
  for (size_t i = 0; i + 1 < out.cu_seqlens.size(); ++i) {
    const int64_t length = out.cu_seqlens[i + 1] - out.cu_seqlens[i];
    if (length > out.max_seqlen) out.max_seqlen = length;
  }
  return out;
}

Unpadded unpad(const std::vector<uint8_t>& padding_mask, int64_t batch, int64_t len) {
  if (batch < 0 || len < 0 || padding_mask.size() != static_cast<size_t>(batch * len)) {
    fail("padding_mask must hold batch * len entries");
  }
  Unpadded out;
  out.cu_seqlens.push_back(0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t real = 0;
    for (int64_t t = 0; t < len; ++t) {
      if (padding_mask[static_cast<size_t>(b * len + t)] != 0) {
        out.indices.push_back(b * len + t);
        ++real;
      }
    }
    out.cu_seqlens.push_back(out.cu_seqlens.back() + real);
    if (real > out.max_seqlen) out.max_seqlen = real;
  }
  return out;
}

std::vector<int64_t> text_position_ids(const std::vector<int64_t>& position_ids, int64_t rows,
                                       int64_t batch, int64_t len) {
  if (rows < 1 || batch < 0 || len < 0 ||
      position_ids.size() != static_cast<size_t>(rows * batch * len)) {
    fail("position_ids must hold rows * batch * len entries");
  }
  return std::vector<int64_t>(position_ids.begin(), position_ids.begin() + batch * len);
}

}  // namespace deltacheck::reference
