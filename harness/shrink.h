// Shrinking a failing case: the smallest case, by the operation's own typed parameters, that still
// fails on the backend the same way. Works from each operation's schema (cases::OpSchema: its
// ParamSpecs and layout), never from a list of one op's parameters, so every registered operation
// shrinks: a layout loses sequences and tokens (a zero-length sequence stays only when removing it
// changes the failure), integers move toward their minimum, choices toward their default (then
// toward the first listed), everything else is left alone. The seed is kept: another seed is other
// inputs, not a smaller case. Deterministic: the candidates are tried in a fixed order and the
// first one that keeps the failure class is taken, so the same failure gives the same minimal id.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "harness/backend.h"
#include "harness/result.h"

namespace deltacheck::harness {

// What a shrink keeps: the verdict and the kind of its reason. For fail and leak the kind is the
// first output judged wrong (or the probe that found it, "probe isolation"), for error the words
// of the message before its first number, quote or colon with the output it names ("threw",
// "left unwritten 'o'"); a leak of o stays a leak of o.
struct FailureClass {
  Verdict verdict = Verdict::kPass;
  std::string kind;
  std::string str() const;  // "leak (o)"
  bool operator==(const FailureClass& o) const { return verdict == o.verdict && kind == o.kind; }
  bool operator!=(const FailureClass& o) const { return !(*this == o); }
};
FailureClass failure_class(const CaseResult& r);

// How big a case is (the trail, the measured sizes): sequences, tokens, input bytes (the op's own
// estimate, nothing allocated) and the id's length.
struct CaseSize {
  int64_t sequences = 0, tokens = 0, input_bytes = 0, id_chars = 0;
  std::string str() const;  // "3 seqs, 128 tokens, 98.3 kB of inputs"
};
CaseSize case_size(const cases::Case& c);

// One accepted step: what changed and the case after it.
struct ShrinkStep {
  std::string change;  // "H 4 -> 1", "layout packed[63,0,65] -> packed[0,65]"
  std::string case_id;
  CaseSize size;
  std::string message;  // the smaller case's reason line
};

struct ShrinkOptions {
  bool probes = true;            // judge candidates with the leakage probes (as run does)
  int max_runs = 400;            // candidate cases run at most (0: no limit)
  double budget_seconds = 0.0;   // wall time at most (0: no limit)
  int64_t max_memory_bytes = 0;  // candidates over it are not tried (0: no limit)
  std::function<void(const ShrinkStep&)> on_step = nullptr;  // each accepted step, as it comes
};

struct ShrinkResult {
  Status status = Status::Ok();  // InvalidArgument when the case does not fail on the backend
  FailureClass kept;             // the original failure class, which every step kept
  CaseResult original, minimal;
  std::vector<ShrinkStep> trail;
  CaseSize before, after;
  int runs = 0;          // candidates run (the original not counted)
  bool complete = true;  // false: the budget ran out with candidates left untried
  double seconds = 0.0;
};

// Shrinks `c`'s failure on `backend`. Never throws for what the backend does.
ShrinkResult shrink(const cases::Case& c, Backend& backend, const ShrinkOptions& options = {});

// The smaller variations of a case, in the order shrink() tries them: {what changes, the case}.
// Each is strictly smaller (fewer sequences or tokens, a lower integer, a choice of lower rank), so
// shrinking ends. Invalid combinations are left out (the case's own schema check).
std::vector<std::pair<std::string, cases::Case>> shrink_candidates(const cases::Case& c);

// Shorter layouts of a layout's text (fewer sequences, then shorter ones), smallest first.
std::vector<std::string> smaller_layouts(const std::string& layout);

}  // namespace deltacheck::harness
