// What the two backward operations, gdr_grad and layer_grad, share: a backward case is its forward
// prefill case plus upstream gradients and an optional padding tail after cu_seqlens[-1]. Its
// schema is the forward's without the cache modes, its `do` and state gradients are drawn per
// sequence (so the isolation probe's salt perturbs one sequence), its tail gradients must be
// exactly zero, and a case with a tail is judged without the probes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ops/operation.h"
#include "ops/schema.h"

namespace deltacheck::ops::grad {

// The forward case of backward case `c` (op `grad_op`): its parameters less `grad_only`, as a case
// of op `forward_op`; InvalidArgument when they break one of the forward problem's own rules
// (HV % H, layouts, ...: the backward schema's check returns it). Throws std::invalid_argument for
// a case of another op (a programming error).
StatusOr<Case> forward_case(const Case& c, const char* grad_op, const char* forward_op,
                            std::initializer_list<const char*> grad_only);

// A backward op's parameters: the forward's, less the cache modes (cache, calls) and its seed,
// then `upstream` (e.g. dht), the padding tail and the seed.
std::vector<ParamSpec> schema_params(const OpSchema& forward, std::vector<ParamSpec> upstream);

// The backward schema's check: the forward problem's own rules (`forward` is c's forward case or
// the rule it breaks), then a padding tail needs a packed layout.
Status check_forward_and_tail(const Case& c, const StatusOr<Case>& forward);

// `do` [.., T, ...] of `row` elements a token: N(0,1) per sequence with the sequence's salt, the
// `tail` rows after the sequences' tokens from the unsalted tail stream.
void fill_do(Tensor& dout, const Layout& layout, uint64_t seed, const GenOptions& o, int64_t row,
             int64_t tail);

// A sequence-major fp32 upstream gradient [N, per]: 0.5 N(0,1) per sequence, salted.
void fill_upstream(Tensor& t, int64_t num_seqs, uint64_t seed, const GenOptions& o, int64_t per);

// Marks the tail rows (tokens [tokens, T)) of each token-major output as must-be-zero;
// `per_token(name)` is an output's elements a token.
template <typename PerToken>
void zero_tail(std::vector<OutputSpec>& token_outputs, int64_t tokens, int64_t T,
               PerToken per_token) {
  for (OutputSpec& s : token_outputs) {
    const int64_t n = per_token(s.name);
    s.must_be_unchanged.push_back(
        {tokens * n, T * n, "a gradient past cu_seqlens[-1] (must be exactly 0)"});
  }
}

// Sequence `seq`'s tokens of a token-major output with `per_token` elements a token.
SeqSlice token_slice(const Layout& layout, int64_t seq, int64_t per_token);
// Row `seq` of a sequence-major output with `per` elements a sequence.
SeqSlice sequence_slice(int64_t seq, int64_t per);

// What the backward operations share as Operations: the oracle (the FP64 backward), one baseline
// per fp32 formulation of the rule's backward in the case's precision (grad_baselines), the
// sequences, and the probes. Repacking keeps the tokens of sequences only: the probes and the leak
// confirmation run a case with a padding tail's sequences without it (its tail is checked bit for
// bit by the plain run). No split probe: splitting the backward needs the state gradients passed
// back from the second call to the first.
class BackwardOperation : public Operation {
 public:
  Values oracle(const Case& c, const TensorMap& in) const override;
  std::vector<Baseline> baselines(const Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override;
  std::vector<int64_t> sequence_lengths(const Case& c) const override;
  bool repackable(const Case& c) const override { return true; }
  int64_t tail_rows(const Case& c) const override;

 protected:
  struct Problem {
    Layout layout;       // the sequences (without the tail)
    DType dtype;         // the activations'
    int64_t tail;        // padding tokens after cu_seqlens[-1]
    const char* prefix;  // of the baselines' names, e.g. "backward "
  };
  virtual Problem problem(const Case& c) const = 0;
  // The backward of the case's inputs: FP64 (`how` null) or in a baseline's arithmetic.
  virtual Values backward(const Case& c, const TensorMap& in,
                          const reference::Arithmetic* how) const = 0;
};

}  // namespace deltacheck::ops::grad
