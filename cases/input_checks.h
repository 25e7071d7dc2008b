// Checks of inputs that did not come from this build's generator (a golden fixture, a failure
// dump): before a backend, the oracle or the tolerance baseline reads them, they must have the
// names, dtypes and shapes the case id implies, packed boundaries and state slots that make sense,
// and no non-finite values. Each rule has its own message ("inputs/cu_seqlens: decreases at index
// 2 (5 after 7): must be non-decreasing"), so a bad fixture is rejected with a reason instead of
// crashing a kernel or silently judging the wrong problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::cases {

// Sequence boundaries: start at 0, never negative, within int32 (kernels index tokens with
// int32), non-decreasing, end at `total`.
Status check_cu_seqlens(const std::vector<int64_t>& cu, int64_t total);

// Per-sequence state slots into a pool of `rows` rows: a negative slot is a padding entry,
// others must be < rows, and no slot may be addressed twice (two sequences would race on one
// state).
Status check_state_slots(const std::vector<int64_t>& slots, int64_t rows);

// Every rule above plus: the same input names as the case generates, each with the generated
// dtype and shape; cu_seqlens equal to the case's layout; 0/1 padding masks; finite floating
// values (a non-finite input is accepted only where the case's own generator puts one). Integer
// inputs (slots, position ids, masks) must equal the generated ones when the inputs were made by
// this generator version (`same_generator`): the operation derives what it checks from the id.
// Messages start with "inputs/<name>: ".
// `want`: the case's generated inputs when the caller has them already (else generated here).
Status check_case_inputs(const Case& c, const TensorMap& inputs, bool same_generator,
                         const TensorMap* want = nullptr);

// One stored input's name, dtype and shape against the generated inputs `want`, before its data
// is read (the same messages as check_case_inputs).
Status check_input_spec(const TensorMap& want, const std::string& name, DType dtype,
                        const std::vector<int64_t>& shape);

}  // namespace deltacheck::cases
