// Input generation: every tensor a case needs, from its id alone. Values depend only on
// (seed, tensor, sequence, element), so a sequence's inputs do not change when its neighbours in a
// pack do, and "regenerate sequence j" is a salt on j's streams.
#pragma once

#include <cstdint>

#include "cases/op.h"

namespace deltacheck::cases {

TensorMap generate_inputs(const Case& c, const GenOptions& options = {});

// Bytes the case's inputs will take, computed without allocating (resource limits).
int64_t estimate_input_bytes(const Case& c);

}  // namespace deltacheck::cases
