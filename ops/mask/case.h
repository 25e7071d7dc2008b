// What the mask-construction ops (mask, layers, segments; defined in ops/mask/case.cc) mean,
// for the code that reads their cases: the key-buffer length a case implies and the layer types a
// `pattern` names. Inputs themselves come from generate_inputs() like every op's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "ops/operation.h"

namespace deltacheck::ops::mask {

// True for the ops whose outputs are masks or segment indices (compared bit-exactly).
bool is_mask_op(const std::string& op);

// kv_length of a mask or layers case: the kv parameter, or offset + q when it is 0 (a dynamic
// cache holds exactly the tokens written so far).
int64_t mask_kv_length(const cases::Case& c);

// The layer_types list a layers case names: a named pattern
//   qwen35      linear x3, full, linear x3, full (Qwen3.5: three linear layers to one full)
//   hybrid3     [linear, sliding, full] x2
//   all-linear  linear x4
//   all-full    full x4
// or an explicit list of short names joined by '+': linear, full, sliding, chunked (e.g.
// pattern=linear+sliding+full+full), each expanded to its *_attention type.
// Throws CaseIdError naming an unknown pattern or type.
std::vector<std::string> mask_layer_types(const std::string& pattern);

// The three operations' definitions (case.cc) and their one Operation (operation.cc).
cases::OpDefinition mask_definition();
cases::OpDefinition layers_definition();
cases::OpDefinition segments_definition();
const Operation& operation();

}  // namespace deltacheck::ops::mask
