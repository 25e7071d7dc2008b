// The mask-construction ops (mask, layers, segments; defined in ops/mask/case.cc): their
// parameters, decoded once from a case id into types, the key-buffer length a case implies and the
// layer types a `pattern` names. Inputs come from generate_inputs() like every op's; the raw form
// the builders take is ops/mask/problem.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "ops/operation.h"

namespace deltacheck::ops::mask {

enum class Op { kMask, kLayers, kSegments };
enum class Cache { kNone, kDynamic, kStatic, kChunked };
enum class Padding { kNone, kLeft, kRight };
enum class Packed { kNone, kPacked, kMrope };
enum class Format { kBool, kAdditiveLowest, kAdditiveInf };
enum class Source { kCu, kPosition, kPadding };
enum class Pad { kLeft, kRight, kMixed };

// The names the case id spells each value with (index = enum value).
inline constexpr std::array<const char*, 3> kOpNames{"mask", "layers", "segments"};
inline constexpr std::array<const char*, 4> kCacheNames{"none", "dynamic", "static", "chunked"};
inline constexpr std::array<const char*, 3> kPaddingNames{"none", "left", "right"};
inline constexpr std::array<const char*, 3> kPackedNames{"none", "packed", "mrope"};
inline constexpr std::array<const char*, 3> kFormatNames{"bool", "additive-lowest", "additive-inf"};
inline constexpr std::array<const char*, 3> kSourceNames{"cu", "position", "padding"};
inline constexpr std::array<const char*, 3> kPadNames{"left", "right", "mixed"};

// A mask, layers or segments case's parameters (fields another op does not have keep their
// defaults).
struct Params {
  Op op = Op::kMask;
  // mask, layers: B rows of q new tokens at cache position `offset`, keys in a buffer of
  // kv_length (the kv parameter, or offset + q when it is 0).
  int64_t B = 1, q = 0, kv = 0, kv_length = 0, offset = 0;
  Cache cache = Cache::kNone;
  int64_t window = 0, chunk = 0;
  Padding padding = Padding::kNone;
  Packed packed = Packed::kNone;
  bool causal = true;                       // mask
  Format format = Format::kBool;            // mask
  cases::DType dtype = cases::DType::kF32;  // mask: of an additive mask
  std::vector<std::string> layer_types;     // layers: the pattern's layer_types
  // segments: B rows of T tokens
  Source source = Source::kPosition;
  int64_t T = 0;
  Pad pad = Pad::kMixed;
  uint64_t seed = 0;
};

// The parameters of a mask, layers or segments case; throws std::invalid_argument for another op.
Params decode(const cases::Case& c);

// True for the ops whose outputs are masks or segment indices (compared bit-exactly).
bool is_mask_op(const std::string& op);

// kv_length of a mask or layers case: the kv parameter, or offset + q when it is 0 (a dynamic
// cache holds exactly the tokens written so far).
int64_t mask_kv_length(const cases::Case& c);

// The layer_types list a layers case names: a named pattern
//   qwen35      linear x3, full, linear x3, full (Qwen3.5: three linear layers to one full)
//   qwen35-gdn  the same with the renamed type: gdn x3, full, gdn x3, full
//   hybrid3     [linear, sliding, full] x2
//   all-linear  linear x4
//   all-full    full x4
// or an explicit list of short names joined by '+': linear, full, sliding, chunked (e.g.
// pattern=linear+sliding+full+full), each expanded to its *_attention type, and mamba, mamba2,
// gdn: linear_attention_mamba, linear_attention_mamba2, linear_attention_gated_delta_net, the
// per-backbone names Transformers PR #46738 gave linear_attention (the same mask rule).
// InvalidArgument naming an unknown pattern or type.
StatusOr<std::vector<std::string>> mask_layer_types(const std::string& pattern);

// The three operations' definitions (case.cc) and their one Operation (operation.cc).
cases::OpDefinition mask_definition();
cases::OpDefinition layers_definition();
cases::OpDefinition segments_definition();
const Operation& operation();

}  // namespace deltacheck::ops::mask
