// The gdr_grad operation: the gated delta rule's backward. Given the forward inputs of the
// corresponding gdr prefill case (bit-identical: the gdr generator makes them), `do` and
// optionally `dht` (the gradient of the final state), the gradients dq, dk, dv, dg, dbeta and,
// when an initial state is given, dh0 (docs/gradients.md, "The harness"). `tail` padding tokens
// after cu_seqlens[-1] belong to no sequence: their gradients must be exactly zero. `cp` cuts the
// packed row into context-parallel calls, one per rank (ops/gdr_grad/context_parallel.h).
#pragma once

#include <cstdint>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "ops/gdr/params.h"
#include "ops/operation.h"

namespace deltacheck::ops::gdr_grad {

struct Params {
  // The forward problem; rule.T counts the tail tokens (the tensors' T), rule.layout does not.
  gdr::Params rule;
  bool dht = false;  // a gradient of the final state is given
  int64_t tail = 0;  // padding tokens after cu_seqlens[-1]
  // Context parallelism: the row cut at these tokens (ascending) into cp.size() + 1 calls, one
  // per rank; empty for one call (cp=0; ops/gdr_grad/context_parallel.h).
  std::vector<int64_t> cp;
  // dh0 is an output when the forward has an initial state.
  bool dh0() const { return rule.state != gdr::State::kNone; }
  int64_t tokens() const { return rule.layout.total_tokens(); }  // cu_seqlens[-1]
};

// The parameters of a gdr_grad case; throws std::invalid_argument for a case of another op.
Params decode(const cases::Case& c);

// The gdr prefill case whose inputs are this case's forward inputs (before the tail).
cases::Case forward_case(const cases::Case& c);

cases::OpDefinition definition();  // case.cc
const Operation& operation();      // operation.cc

}  // namespace deltacheck::ops::gdr_grad
