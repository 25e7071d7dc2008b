// Cache modes that are a sequence of calls: the harness drives them the way a serving runtime
// would, carrying each sequence's state from the backend's own outputs into its next call.
//   cache=chunked  every sequence prefilled in `calls` pieces cut at generated points (mid-chunk,
//                  length-1 and empty pieces among them), one call per piece index
//   cache=dynamic  a prefill of all but the last `calls` tokens, then one-token decode calls
//                  (cases with cache=decode, which backends may route to a decode kernel)
// The expectation is the one-shot prefill, so every call boundary is checked against it.
#pragma once

#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "harness/backend.h"
#include "harness/input_check.h"
#include "harness/op_names.h"

namespace deltacheck::harness {

struct Call {
  std::string cache;  // cache mode of the call's case: prefill or decode
  std::vector<Piece> pieces;
};

// Whether a backend can run a case: for a driven case (a serving scenario), whether it runs
// every kind of call the scenario makes (the reason names the first it cannot); otherwise its
// own answer.
Support backend_supports(const Backend& backend, const cases::Case& c);

// Whether the backend gets the case's inputs as they are, in one call (not a call plan, not the
// operation's own calls): only then is a copy of them taken ahead of use (input_check.h).
bool one_call(const cases::Case& c);

// The calls of a multi-call case; empty for single-call and driven cases.
std::vector<Call> call_plan(const cases::Case& c);

// Runs a case on a backend: one call, the call plan with states carried between calls, or the
// operation's own calls (driven cases), each call's outputs allocated poisoned and checked
// complete before the operation reads them. For a backend that checks_inputs(), every call's
// inputs are checked unchanged after it; `inputs_copy`, when given, is a copy of `inputs` taken
// ahead (used when `inputs` go to the backend as they are).
Status execute(Backend& backend, const cases::Case& c, const cases::TensorMap& inputs,
               cases::TensorMap& outputs, const InputCopy* inputs_copy = nullptr);

}  // namespace deltacheck::harness
