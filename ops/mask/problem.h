// Reads a mask, layers or segments case (ops/mask/case.cc) and its inputs into the plain form the
// mask builders and the reference take, and fixes the outputs each op produces:
//   mask      mask [B,1,q,kv] (u8, or the dtype for additive formats), needed [1] (u8),
//             fully_masked [B,q] (u8)
//   layers    one output per distinct layer type, named by it, in order of first appearance:
//             [B,1,q,kv] u8 for attention types, [B,q] u8 for linear_attention (its token
//             validity; all ones when the builder returns no mask); mask_kind [types] u8
//             (0 attention, 1 validity, 2 none); needed [types] u8; layer_to_mask [layers] i64
//   segments  cu:       sequence_index [T] i64
//             position: sequence_index [B*T], cu_seqlens [B*T+1] i64 (entries past num_seqs
//                       repeat B*T, so the buffer is a valid cu_seqlens of a fixed size),
//                       num_seqs [1], max_seqlen [1]
//             padding:  indices [B*T] i64 (entries past the real tokens are -1),
//                       cu_seqlens [B+1], max_seqlen [1]
// Fixed-size outputs keep a builder that finds the wrong number of sequences a plain mismatch
// (verdict fail) rather than a malformed output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "kernels/common/mask_params.h"
#include "ops/operation.h"
#include "reference/mask.h"

namespace deltacheck::ops::mask {

// Output codes of layers' mask_kind.
enum class LayerOutputKind : uint8_t { kAttention = 0, kValidity = 1, kNone = 2 };

struct MaskProblem {
  std::string op;  // mask | layers | segments

  // mask, layers
  int64_t batch = 1, q_len = 0, kv_length = 0, q_offset = 0;
  bool causal = true;
  int64_t sliding_window = 0, chunk_size = 0;
  bool static_cache = false;
  const uint8_t* padding_mask = nullptr;  // [B, kv_length] or nullptr
  const int64_t* position_ids = nullptr;  // [rows, B, q_len] or nullptr
  int64_t position_id_rows = 1;
  std::string format;                       // mask: bool | additive-lowest | additive-inf
  cases::DType dtype = cases::DType::kF32;  // mask: dtype of an additive mask
  std::vector<std::string> layer_types;     // layers
  std::vector<std::string> distinct_types;  // layers, in order of first appearance

  // segments
  std::string source;  // cu | position | padding
  int64_t rows = 1, len = 0;
  const int64_t* cu_seqlens = nullptr;  // [num_seqs + 1]
  int64_t num_seqs = 0;
  const int64_t* segment_positions = nullptr;  // [rows, len]
  const uint8_t* segment_padding = nullptr;    // [rows, len]
};

// Throws std::invalid_argument when an input the case implies is missing or malformed.
MaskProblem mask_problem(const cases::Case& c, const cases::TensorMap& inputs);

std::vector<OutputSpec> mask_outputs(const cases::Case& c);

// A mask or layers problem as every mask builder takes it (kernels/common/mask_params.h), its
// pointers the problem's host buffers (a device builder replaces them with its copies).
kernels::MaskParams mask_params(const MaskProblem& p);

// The reference's view of a mask or layers case (the layer types' own rules are applied by
// reference::layer_masks).
reference::MaskSpec reference_spec(const MaskProblem& p);

// The additive fill value the reference expects for a mask case.
reference::AdditiveFill reference_fill(const MaskProblem& p);

}  // namespace deltacheck::ops::mask
