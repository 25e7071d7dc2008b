// What the harness knows about each operation: the outputs it produces, the FP64 expectation
// (from reference/), the same-precision baseline the tolerance is measured against, and how each
// output splits into packed sequences for per-sequence metrics.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"
#include "ops/precision.h"

namespace deltacheck::ops {

enum class TensorMajor { kNone, kToken, kSequence };

// A range of flat elements of an output, with what it is (for messages).
struct ElementRange {
  int64_t begin, end;
  std::string what;
};

struct OutputSpec {
  std::string name;
  cases::DType dtype;
  std::vector<int64_t> shape;
  // The precision the output is computed in, when it is lower than its storage (an fp32 state
  // that went through bf16 activations): its tolerance follows this dtype.
  std::optional<cases::DType> precision = std::nullopt;
  // Multiplies the dtype's relative-RMS ceiling (harness/tolerance.h).
  double ceiling_factor = 1.0;
  // Elements the implementation may leave alone or fill as it likes (padding entries' outputs).
  std::vector<ElementRange> dont_care = {};
  // Elements that must come back bit-identical to their expectation (pool slots nobody
  // addresses), checked before any tolerance.
  std::vector<ElementRange> must_be_unchanged = {};
};

// The elements of one output that belong to one sequence: [begin, end) in flat element order,
// `per_token` elements per token (0 for per-sequence tensors such as states).
struct SeqSlice {
  int64_t seq;
  int64_t begin, end;
  int64_t per_token;
};

using Values = std::map<std::string, std::vector<double>>;  // output name -> flat values

// How a case is driven through a backend: one call, a chunked prefill (each sequence split into
// `count` calls at seeded points), or a dynamic cache (a prefill, then up to `count` one-token
// decode steps per sequence). The harness plans the calls (harness/call_plan.h). Driven: the
// operation plays a runtime and makes its own sequence of calls (Operation::drive).
struct CallMode {
  enum class Kind { kOne, kChunked, kDynamic, kDriven };
  Kind kind = Kind::kOne;
  int64_t count = 1;
};

// One row (a request's piece) of one call of a driven case, with what the runtime the operation
// plays decided around it. Backends may read it (the deliberately wrong runtimes do); the call's
// case and tensors are all a kernel takes.
struct DrivenRow {
  int64_t request = 0;
  int64_t lane = 0;      // the state slot the request lives in while it runs
  int64_t position = 0;  // the row's first token in the request's sequence
  int64_t tokens = 0;
  bool reset = false;        // the lane was reset to zero for this request before this call
  int64_t hit_request = -1;  // prefix hit: the row starts from this request's checkpoint
  int64_t hit_block = -1;    // at this block (the state after hit_block * block tokens)
  int64_t accepted = -1;     // verify: draft tokens accepted (0 .. k); -1 for a prefill row
  // Block checkpoints taken from this row: {block, the row's token whose state it is}.
  std::vector<std::pair<int64_t, int64_t>> checkpoints = {};
};

struct DrivenCall {
  int64_t index = 0;  // in the scenario's order
  std::string kind;   // "prefill" | "verify"
  std::vector<DrivenRow> rows;
};

// How a driven operation reaches the backend under test: runs one call (a case of another
// operation, e.g. gdr, with its tensors) and returns the outputs it wrote, or why it could not.
using RunCall = std::function<StatusOr<cases::TensorMap>(
    const DrivenCall& call, const cases::Case& c, const cases::TensorMap& inputs)>;

// One straightforward implementation of an operation in the case's precision, e.g. "chunked
// fp32, bf16 operands": its outputs on the case's inputs. The tolerance is measured against the
// worst of an operation's baselines, per tensor and per sequence (harness/tolerance.h).
struct Baseline {
  std::string name;
  Values values;
};

class Operation {
 public:
  virtual ~Operation() = default;
  virtual std::vector<OutputSpec> outputs(const cases::Case& c) const = 0;
  virtual Values oracle(const cases::Case& c, const cases::TensorMap& inputs) const = 0;
  // The straightforward implementations in real use, in the case's precision (tolerance
  // baselines); `precision` is the backend's declared profile, whose choices add (or remove)
  // baselines (ops/precision.h).
  // Empty for operations compared bit-exactly.
  virtual std::vector<Baseline> baselines(const cases::Case& c, const cases::TensorMap& inputs,
                                          const PrecisionProfile& precision) const = 0;
  // Entry `i` of baselines() alone, with the same bits: the split probe carries each baseline's
  // own states into its second call, one formulation at a time. The default computes them all.
  virtual Baseline baseline(const cases::Case& c, const cases::TensorMap& inputs,
                            const PrecisionProfile& precision, size_t i) const {
    return baselines(c, inputs, precision).at(i);
  }
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

  // How each input and output is laid out, for repacking sequences (ops/repack.h): token-major
  // ([B, T, ...] or [T, ...]), sequence-major ([N, ...]), or neither (weights, copied as they are).
  virtual TensorMajor major(const std::string& tensor) const { return TensorMajor::kNone; }
  // Whether sequences of this case can be run alone / reordered / split by repacking (probes,
  // leak confirmation). False e.g. where states live in a shared slot-addressed pool.
  virtual bool repackable(const cases::Case& c) const { return false; }
  // Token rows of token-major tensors after the sequences' tokens: a padding tail after
  // cu_seqlens[-1] (the backward ops' `tail` parameter). Repacking leaves them out: a repacked
  // case is its sequences' tokens only, with `tail=0` (ops/repack.h).
  virtual int64_t tail_rows(const cases::Case& c) const { return 0; }
  // Whether a wrong sequence after a right first one is presumed a leak until isolation says
  // otherwise. False where the case cannot be isolated and its sequences share no computation by
  // the contract (gdr's serving modes: a wrong state row is its own sequence's failure), so the
  // verdict stays fail rather than an unconfirmable leak.
  virtual bool presume_leaks(const cases::Case& c) const { return true; }
  // Outputs that feed the next call's inputs when a sequence continues: {output, input} pairs,
  // e.g. {"final_state", "initial_state"}. Empty when the op keeps no state.
  virtual std::vector<std::pair<std::string, std::string>> carried_states(
      const cases::Case& c) const {
    return {};
  }
  // How the case is split into calls (one call unless the op has multi-call cache modes).
  virtual CallMode call_mode(const cases::Case& c) const { return {}; }

  // Driven cases (CallMode::Kind::kDriven): the operation plays the runtime, making each call
  // through `run` with states taken from the backend's own earlier outputs, and writes `outputs`.
  virtual Status drive(const cases::Case& c, const cases::TensorMap& inputs,
                       cases::TensorMap& outputs, const RunCall& run) const {
    return Status::Internal("operation '" + c.op() + "' is not driven");
  }
  // The kinds of call a driven case makes, one case each with what it needs (a backend that
  // cannot run one of them cannot run the scenario), e.g. {"verify", gdr(...cache=spec...)}.
  virtual std::vector<std::pair<std::string, cases::Case>> driven_calls(
      const cases::Case& c) const {
    return {};
  }
  // For a driven case judged wrong from token `token` of sequence `seq` (-1: a per-sequence
  // output): which request, call and block that is, in words. Empty when the op cannot tell.
  virtual std::string explain_failure(const cases::Case& c, int64_t seq, int64_t token) const {
    return "";
  }
};

// The operation named by c.op() (ops/registry.cc); throws std::invalid_argument if none, which a
// case (its op's schema came from the registry) cannot cause: a programming error.
const Operation& operation_for(const cases::Case& c);

}  // namespace deltacheck::ops
