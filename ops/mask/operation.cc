// The mask, layers and segments operations: outputs (ops/mask/problem.h), the exact oracle
// from reference/mask, bit-exact comparison, and mismatch reports that say where an element is
// and which rule decided it, e.g. "(b=0, q=3, kv=5): reference says masked by window (...)".
#include "ops/operation.h"

#include <fmt/format.h>

#include <stdexcept>

#include "ops/mask/params.h"
#include "ops/mask/problem.h"
#include "reference/mask.h"

namespace deltacheck::ops::mask {
namespace {

using cases::TensorMap;

std::vector<double> as_doubles(const std::vector<uint8_t>& v) {
  return std::vector<double>(v.begin(), v.end());
}
std::vector<double> as_doubles(const std::vector<int64_t>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(v[i]);
  return out;
}

// The spec reference::layer_masks uses for an attention layer type.
reference::MaskSpec layer_spec(reference::MaskSpec s, const std::string& type) {
  s.causal = true;
  if (type != "sliding_attention") s.sliding_window = 0;
  if (type != "chunked_attention") s.chunk_size = 0;
  return s;
}

// Why the reference says a mask is (not) needed, in the order reference::mask_needed checks.
std::string needed_reason(const reference::MaskSpec& s) {
  if (s.static_cache) return "static cache: masks are always built";
  if (!s.causal) return "bidirectional";
  if (s.sliding_window > 0 && s.kv_length >= s.sliding_window)
    return fmt::format("window {} reached (kv_length {})", s.sliding_window, s.kv_length);
  if (s.chunk_size > 0 && s.kv_length >= s.chunk_size)
    return fmt::format("chunk {} reached (kv_length {})", s.chunk_size, s.kv_length);
  for (uint8_t real : s.padding_mask)
    if (real == 0) return "padding";
  if (reference::has_packing(s)) return "packed sequences";
  return fmt::format("q_len {}, kv_length {}, q_offset {}", s.q_len, s.kv_length,
                     s.q_offset.empty() ? 0 : s.q_offset[0]);
}

// "(b=0, q=3, kv=5): reference says masked by window (kv 5 <= q_abs 9 - W 4)"
std::string describe_mask_element(const reference::MaskSpec& s, int64_t index) {
  const int64_t kv = index % s.kv_length, row = index / s.kv_length;
  const int64_t q = row % s.q_len, b = row / s.q_len;
  const reference::MaskDecision d = reference::explain(s, b, q, kv);
  const size_t colon = d.detail.find(": ");
  const std::string numbers = colon == std::string::npos ? d.detail : d.detail.substr(colon + 2);
  return fmt::format(
      "(b={}, q={}, kv={}): reference says {} ({})", b, q, kv,
      d.allowed ? "allowed" : std::string("masked by ") + reference::mask_rule_name(d.rule),
      numbers);
}

std::string describe_row(const reference::MaskSpec& s, const std::vector<uint8_t>& rows,
                         int64_t index) {
  const int64_t b = index / s.q_len, q = index % s.q_len;
  return fmt::format("(b={}, q={}): reference says {}", b, q,
                     rows[static_cast<size_t>(index)] ? "fully masked (no key allowed)"
                                                      : "at least one key allowed");
}

class MaskOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override { return mask_outputs(c); }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    const MaskProblem p = mask_problem(c, in);
    if (p.op == "segments") return segments_oracle(p);
    const reference::MaskSpec spec = reference_spec(p);
    Values out;
    if (p.op == "mask") {
      if (p.format == "bool") {
        out["mask"] = as_doubles(reference::build_bool_mask(spec));
      } else {
        const std::vector<float> m = reference::build_additive_mask(spec, reference_fill(p));
        out["mask"].assign(m.begin(), m.end());
      }
      out["needed"] = {reference::mask_needed(spec) ? 1.0 : 0.0};
      out["fully_masked"] = as_doubles(reference::fully_masked_rows(spec));
      return out;
    }
    const reference::LayerMasks lm = reference::layer_masks(p.layer_types, spec);
    std::vector<double> kinds, needed;
    for (const reference::LayerMask& m : lm.masks) {
      LayerOutputKind kind = LayerOutputKind::kAttention;
      if (m.kind == reference::LayerMaskKind::kValidity) kind = LayerOutputKind::kValidity;
      if (m.kind == reference::LayerMaskKind::kNone) kind = LayerOutputKind::kNone;
      kinds.push_back(static_cast<double>(kind));
      needed.push_back(m.needed ? 1.0 : 0.0);
      if (m.kind == reference::LayerMaskKind::kNone)
        out[m.layer_type].assign(static_cast<size_t>(p.batch * p.q_len), 1.0);
      else
        out[m.layer_type] = as_doubles(m.mask);
    }
    out["mask_kind"] = kinds;
    out["needed"] = needed;
    out["layer_to_mask"] = as_doubles(lm.layer_to_mask);
    return out;
  }

  // Masks have no same-precision baseline: they are compared bit-exactly.
  std::vector<Baseline> baselines(const cases::Case&, const TensorMap&,
                                  const PrecisionProfile&) const override {
    return {};
  }
  std::vector<SeqSlice> slices(const cases::Case&, const std::string&) const override { return {}; }
  std::vector<int64_t> sequence_lengths(const cases::Case&) const override { return {}; }
  bool exact(const cases::Case&) const override { return true; }

  std::string describe_element(const cases::Case& c, const TensorMap& in, const std::string& output,
                               int64_t index) const override {
    const MaskProblem p = mask_problem(c, in);
    if (p.op == "segments") return describe_segments(p, output, index);
    const reference::MaskSpec spec = reference_spec(p);
    if (p.op == "mask") {
      if (output == "mask") return describe_mask_element(spec, index);
      if (output == "needed")
        return fmt::format("needed flag: reference says {} ({})",
                           reference::mask_needed(spec) ? "a mask is needed" : "no mask needed",
                           needed_reason(spec));
      return describe_row(spec, reference::fully_masked_rows(spec), index);
    }
    const reference::LayerMasks lm = reference::layer_masks(p.layer_types, spec);
    if (output == "layer_to_mask") {
      const int64_t m = lm.layer_to_mask.at(static_cast<size_t>(index));
      return fmt::format("layer {} ({}): reference says mask {}", index,
                         p.layer_types.at(static_cast<size_t>(index)), m);
    }
    if (output == "mask_kind" || output == "needed") {
      const reference::LayerMask& m = lm.masks.at(static_cast<size_t>(index));
      if (output == "mask_kind")
        return fmt::format(
            "layer type '{}': reference says a {} mask ({}=attention, {}=validity, "
            "{}=none)",
            m.layer_type, reference::layer_mask_kind_name(m.kind),
            static_cast<int>(LayerOutputKind::kAttention),
            static_cast<int>(LayerOutputKind::kValidity), static_cast<int>(LayerOutputKind::kNone));
      return fmt::format("layer type '{}': reference says {}", m.layer_type,
                         m.needed ? "a mask is needed" : "no mask needed");
    }
    if (reference::is_linear_attention_type(output)) {
      const int64_t b = index / p.q_len, q = index % p.q_len;
      const std::vector<uint8_t> valid = reference::token_validity(spec);
      return fmt::format("(b={}, q={}): reference says token {}", b, q,
                         valid[static_cast<size_t>(index)] ? "valid" : "padding");
    }
    return describe_mask_element(layer_spec(spec, output), index);
  }

 private:
  static Values segments_oracle(const MaskProblem& p) {
    Values out;
    const int64_t n = p.rows * p.len;
    if (p.source == "cu") {
      out["sequence_index"] = as_doubles(reference::sequence_index_from_cu_seqlens(
          std::vector<int64_t>(p.cu_seqlens, p.cu_seqlens + p.num_seqs + 1)));
    } else if (p.source == "position") {
      const reference::PackedSegments s = reference::segments_from_position_ids(
          std::vector<int64_t>(p.segment_positions, p.segment_positions + n), p.rows, p.len);
      std::vector<int64_t> cu = s.cu_seqlens;
      const int64_t num = static_cast<int64_t>(cu.size()) - 1;
      cu.resize(static_cast<size_t>(n + 1), n);
      out["cu_seqlens"] = as_doubles(cu);
      out["num_seqs"] = {static_cast<double>(num)};
      out["sequence_index"] = as_doubles(s.sequence_index);
      out["max_seqlen"] = {static_cast<double>(s.max_seqlen)};
    } else {
      const reference::Unpadded u = reference::unpad(
          std::vector<uint8_t>(p.segment_padding, p.segment_padding + n), p.rows, p.len);
      std::vector<int64_t> indices = u.indices;
      indices.resize(static_cast<size_t>(n), -1);
      out["indices"] = as_doubles(indices);
      out["cu_seqlens"] = as_doubles(u.cu_seqlens);
      out["max_seqlen"] = {static_cast<double>(u.max_seqlen)};
    }
    return out;
  }

  static std::string describe_segments(const MaskProblem& p, const std::string& output,
                                       int64_t index) {
    if (output == "sequence_index" && p.source == "position") {
      const int64_t b = index / p.len, t = index % p.len;
      const int64_t pos = p.segment_positions[index];
      const std::string why =
          t == 0 ? "a row start"
                 : fmt::format("position {} after {}{}", pos, p.segment_positions[index - 1],
                               pos - p.segment_positions[index - 1] == 1 ? " (continues)"
                                                                         : " (starts a sequence)");
      return fmt::format("token {} (b={}, t={}, {})", index, b, t, why);
    }
    if (output == "sequence_index") {
      int64_t seq = 0;
      while (seq < p.num_seqs && p.cu_seqlens[seq + 1] <= index) ++seq;
      return fmt::format("token {}: reference says sequence {} (cu_seqlens [{}, {}))", index, seq,
                         p.cu_seqlens[seq], p.cu_seqlens[seq + 1]);
    }
    if (output == "indices") return fmt::format("real token #{}", index);
    return fmt::format("{}[{}]", output, index);
  }
};

}  // namespace

const Operation& operation() {
  static const MaskOperation op;
  return op;
}

}  // namespace deltacheck::ops::mask
