// What the harness knows about each operation: the outputs it produces, the FP64 expectation
// (from reference/), the same-precision baseline the tolerance is measured against, and how each
// output splits into packed sequences for per-sequence metrics.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"

namespace deltacheck::harness {

struct OutputSpec {
  std::string name;
  cases::DType dtype;
  std::vector<int64_t> shape;
};

// The elements of one output that belong to one sequence: [begin, end) in flat element order,
// `per_token` elements per token (0 for per-sequence tensors such as states).
struct SeqSlice {
  int64_t seq;
  int64_t begin, end;
  int64_t per_token;
};

using Values = std::map<std::string, std::vector<double>>;  // output name -> flat values

class Operation {
 public:
  virtual ~Operation() = default;
  virtual std::vector<OutputSpec> outputs(const cases::Case& c) const = 0;
  virtual Values oracle(const cases::Case& c, const cases::TensorMap& inputs) const = 0;
  // A straightforward implementation in the case's precision (tolerance baseline).
  virtual Values baseline(const cases::Case& c, const cases::TensorMap& inputs) const = 0;
  virtual std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const = 0;
  // Number of packed sequences, and each one's token count.
  virtual std::vector<int64_t> sequence_lengths(const cases::Case& c) const = 0;

  // Outputs compared bit-exactly instead of with a tolerance (masks, segment indices).
  virtual bool exact(const cases::Case& c) const { return false; }
  // Where flat element `index` of an output is and what decided it, for mismatch reports, e.g.
  // "(b=0, q=3, kv=5): reference says masked by window".
  virtual std::string describe_element(const cases::Case& c, const cases::TensorMap& inputs,
                                       const std::string& output, int64_t index) const {
    return "index " + std::to_string(index);
  }

  // Sequence `seq` of a case as a case of its own (layout single[len]), with its slice of the
  // inputs and of any output values: the basis of the "alone" check that tells a leak (right
  // alone, wrong in the pack) from a plain failure.
  virtual bool can_isolate(const cases::Case& c) const { return false; }
  virtual cases::Case alone_case(const cases::Case& c, int64_t seq) const { return c; }
  virtual cases::TensorMap alone_inputs(const cases::Case& c, const cases::TensorMap& inputs,
                                        int64_t seq) const {
    return {};
  }
  virtual Values alone_values(const cases::Case& c, const Values& values, int64_t seq) const {
    return {};
  }
};

// The operation named by c.op(); throws std::invalid_argument if none.
const Operation& operation_for(const cases::Case& c);

// One per operation file.
const Operation& gdr_operation();

}  // namespace deltacheck::harness
