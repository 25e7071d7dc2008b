// Mask, layers and segments cases read into raw form; their output shapes.
#include "ops/mask/problem.h"

#include <algorithm>
#include <stdexcept>

#include "ops/mask/params.h"
#include "reference/mask.h"

namespace deltacheck::ops::mask {
namespace {

using cases::DType;

const cases::Tensor* input(const cases::TensorMap& in, const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape) {
  const cases::Tensor* t = in.find(name);
  if (t && (t->dtype() != dtype || t->shape() != shape))
    throw std::invalid_argument("input '" + name + "' is " + cases::dtype_name(t->dtype()) +
                                cases::shape_string(t->shape()) + ", expected " +
                                cases::dtype_name(dtype) + cases::shape_string(shape));
  return t;
}

}  // namespace

MaskProblem mask_problem(const cases::Case& c, const cases::TensorMap& in) {
  const Params d = decode(c);
  MaskProblem p;
  p.op = kOpNames[static_cast<size_t>(d.op)];
  if (d.op == Op::kSegments) {
    p.source = kSourceNames[static_cast<size_t>(d.source)];
    p.rows = d.B;
    p.len = d.T;
    if (d.source == Source::kCu) {
      const cases::Tensor* cu = in.find("cu_seqlens");
      if (!cu || cu->dtype() != DType::kI64 || cu->shape().size() != 1 || cu->numel() < 1)
        throw std::invalid_argument("segments(source=cu) needs an int64 cu_seqlens input");
      p.cu_seqlens = cu->as<int64_t>();
      p.num_seqs = cu->numel() - 1;
    } else if (d.source == Source::kPosition) {
      const cases::Tensor* t = input(in, "position_ids", DType::kI64, {p.rows, p.len});
      if (!t) throw std::invalid_argument("segments(source=position) needs position_ids");
      p.segment_positions = t->as<int64_t>();
    } else {
      const cases::Tensor* t = input(in, "padding_mask", DType::kU8, {p.rows, p.len});
      if (!t) throw std::invalid_argument("segments(source=padding) needs padding_mask");
      p.segment_padding = t->as<uint8_t>();
    }
    return p;
  }
  p.batch = d.B;
  p.q_len = d.q;
  p.kv_length = d.kv_length;
  p.q_offset = d.offset;
  p.static_cache = d.cache == Cache::kStatic;
  p.sliding_window = d.window;
  p.chunk_size = d.chunk;
  if (d.op == Op::kMask) {
    p.causal = d.causal;
    p.format = kFormatNames[static_cast<size_t>(d.format)];
    p.dtype = d.format == Format::kBool ? DType::kU8 : d.dtype;
  } else {
    p.layer_types = d.layer_types;
    for (const std::string& t : p.layer_types)
      if (std::find(p.distinct_types.begin(), p.distinct_types.end(), t) == p.distinct_types.end())
        p.distinct_types.push_back(t);
  }
  if (d.padding != Padding::kNone) {
    const cases::Tensor* t = input(in, "padding_mask", DType::kU8, {p.batch, p.kv_length});
    if (!t)
      throw std::invalid_argument(std::string("padding=") +
                                  kPaddingNames[static_cast<size_t>(d.padding)] +
                                  " needs padding_mask");
    p.padding_mask = t->as<uint8_t>();
  }
  if (d.packed != Packed::kNone) {
    p.position_id_rows = d.packed == Packed::kMrope ? 3 : 1;
    const cases::Tensor* t =
        input(in, "position_ids", DType::kI64, {p.position_id_rows, p.batch, p.q_len});
    if (!t)
      throw std::invalid_argument(std::string("packed=") +
                                  kPackedNames[static_cast<size_t>(d.packed)] +
                                  " needs position_ids");
    p.position_ids = t->as<int64_t>();
  }
  return p;
}

std::vector<OutputSpec> mask_outputs(const cases::Case& c) {
  const Params d = decode(c);
  if (d.op == Op::kSegments) {
    const int64_t B = d.B, T = d.T, n = B * T;
    if (d.source == Source::kCu) return {{"sequence_index", DType::kI64, {T}}};
    if (d.source == Source::kPosition)
      return {{"sequence_index", DType::kI64, {n}},
              {"cu_seqlens", DType::kI64, {n + 1}},
              {"num_seqs", DType::kI64, {1}},
              {"max_seqlen", DType::kI64, {1}}};
    return {{"indices", DType::kI64, {n}},
            {"cu_seqlens", DType::kI64, {B + 1}},
            {"max_seqlen", DType::kI64, {1}}};
  }
  const int64_t B = d.B, q = d.q, kv = d.kv_length;
  if (d.op == Op::kMask) {
    const DType t = d.format == Format::kBool ? DType::kU8 : d.dtype;
    return {{"mask", t, {B, 1, q, kv}},
            {"needed", DType::kU8, {1}},
            {"fully_masked", DType::kU8, {B, q}}};
  }
  const std::vector<std::string>& layers = d.layer_types;
  std::vector<std::string> distinct;
  for (const std::string& t : layers)
    if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  std::vector<OutputSpec> out;
  for (const std::string& t : distinct) {
    if (reference::is_linear_attention_type(t))
      out.push_back({t, DType::kU8, {B, q}});
    else
      out.push_back({t, DType::kU8, {B, 1, q, kv}});
  }
  const int64_t n = static_cast<int64_t>(distinct.size());
  out.push_back({"mask_kind", DType::kU8, {n}});
  out.push_back({"needed", DType::kU8, {n}});
  out.push_back({"layer_to_mask", DType::kI64, {static_cast<int64_t>(layers.size())}});
  return out;
}

reference::MaskSpec reference_spec(const MaskProblem& p) {
  reference::MaskSpec s;
  s.batch = p.batch;
  s.q_len = p.q_len;
  s.kv_length = p.kv_length;
  s.q_offset = {p.q_offset};
  s.causal = p.causal;
  s.sliding_window = p.sliding_window;
  s.chunk_size = p.chunk_size;
  if (p.padding_mask) s.padding_mask.assign(p.padding_mask, p.padding_mask + p.batch * p.kv_length);
  if (p.position_ids) {
    s.position_id_rows = p.position_id_rows;
    s.position_ids.assign(p.position_ids, p.position_ids + p.position_id_rows * p.batch * p.q_len);
  }
  s.static_cache = p.static_cache;
  return s;
}

reference::AdditiveFill reference_fill(const MaskProblem& p) {
  if (p.format == "additive-inf") return reference::AdditiveFill::kNegativeInfinity;
  if (p.dtype == DType::kBF16) return reference::AdditiveFill::kBFloat16Lowest;
  if (p.dtype == DType::kF16) return reference::AdditiveFill::kFloat16Lowest;
  return reference::AdditiveFill::kFloat32Lowest;
}

kernels::MaskParams mask_params(const MaskProblem& p) {
  kernels::MaskParams b;
  b.batch = p.batch;
  b.q_len = p.q_len;
  b.kv_length = p.kv_length;
  b.q_offset = p.q_offset;
  b.causal = p.causal;
  b.sliding_window = p.sliding_window;
  b.chunk_size = p.chunk_size;
  b.padding_mask = p.padding_mask;
  b.position_ids = p.position_ids;
  b.position_id_rows = p.position_id_rows;
  b.static_cache = p.static_cache;
  return b;
}

}  // namespace deltacheck::ops::mask
