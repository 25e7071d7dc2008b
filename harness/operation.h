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

enum class TensorMajor { kNone, kToken, kSequence };

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

  // How each input and output is laid out, for repacking sequences (harness/repack.h): token-major
  // ([B, T, ...] or [T, ...]), sequence-major ([N, ...]), or neither (weights, copied as they are).
  virtual TensorMajor major(const std::string& tensor) const { return TensorMajor::kNone; }
  // Outputs that feed the next call's inputs when a sequence continues: {output, input} pairs,
  // e.g. {"final_state", "initial_state"}. Empty when the op keeps no state.
  virtual std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const {
    return {};
  }
};

// The operation named by c.op(); throws std::invalid_argument if none.
const Operation& operation_for(const cases::Case& c);

// One per operation file.
const Operation& gdr_operation();

}  // namespace deltacheck::harness
