// The layer_grad operation: the backward of the whole linear-attention layer. Given the forward
// inputs of the corresponding layer prefill case (bit-identical: the layer generator makes them),
// `do` and optionally `dht` and `dconv` (the gradients of the final recurrent and conv states),
// the gradients of every input and parameter: dqkv, dz, da, db per token, the conv weight and bias,
// A_log, dt_bias and the norm weight summed over every token, and, when the forward has initial
// states, dinitial_state and dinitial_conv_state (docs/gradients.md, "The layer_grad operation").
// `tail` padding tokens after cu_seqlens[-1] belong to no sequence: their gradients must be
// exactly zero.
#pragma once

#include <cstdint>

#include "cases/case.h"
#include "cases/op.h"
#include "ops/layer/params.h"
#include "ops/operation.h"

namespace deltacheck::ops::layer_grad {

struct Params {
  // The forward problem; layer.T counts the tail tokens (the tensors' T), layer.layout does not.
  layer::Params layer;
  bool dht = false;    // a gradient of the final recurrent state is given
  bool dconv = false;  // a gradient of the final conv state is given
  int64_t tail = 0;    // padding tokens after cu_seqlens[-1]
  // dinitial_state and dinitial_conv_state are outputs when the forward has initial states.
  bool states() const { return layer.state != layer::State::kNone; }
  int64_t tokens() const { return layer.layout.total_tokens(); }  // cu_seqlens[-1]
};

// The parameters of a layer_grad case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

// The layer prefill case whose inputs are this case's forward inputs (before the tail).
cases::Case forward_case(const cases::Case& c);

cases::OpDefinition definition();  // case.cc
const Operation& operation();      // operation.cc

}  // namespace deltacheck::ops::layer_grad
