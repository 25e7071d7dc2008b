// Hunting: case ids drawn from each operation's whole parameter space (its schema, not the suites'
// lists), weighted toward the shapes where bugs were found — tail sweeps (T % 64 in 1..16 and
// 63..65), many tiny sequences, zero-length ones at the start, middle and end, one long among
// short ones, odd head dims, GVA ratios — run with the probes, and each new failure shrunk
// (harness/shrink.h). The case's own schema check rejects invalid draws. Draw i of a hunt depends
// on (seed, i) only: a hunt is reproducible from its seed, and shard I of N takes the draws
// i % N == I, so shards draw disjoint cases whose union is the unsharded hunt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cases/case.h"
#include "harness/backend.h"
#include "harness/result.h"
#include "harness/shrink.h"

namespace deltacheck::harness {

// Draw `index` of a hunt with `seed` over the operations `ops` (empty: every registered one):
// the case, or the reason the drawn parameters were refused by the op's schema.
StatusOr<cases::Case> draw_case(uint64_t seed, uint64_t index, const std::vector<std::string>& ops);

// A layout drawn for a hunt (the weighted families above), from random words `r`.
std::string draw_layout(uint64_t seed, uint64_t index);

struct HuntOptions {
  uint64_t seed = 0;
  std::vector<std::string> ops;  // empty: every operation
  std::string filter;            // keep drawn ids matching this regex (RE2); "" all
  double budget_seconds = 60.0;  // wall time for drawing and running (shrinking included)
  int64_t max_cases = 0;         // cases run at most (0: until the budget)
  int64_t max_findings = 0;      // stop after this many findings (0: until the budget)
  int shard_index = 0, shard_count = 1;
  bool probes = true;
  bool shrink = true;  // shrink the first failure of each failure class
  ShrinkOptions shrink_options;
  int64_t max_memory_bytes = 0;
  // Called after each case run (progress) and each finding.
  std::function<void(const CaseResult& r, int64_t run, int64_t found)> on_case = nullptr;
};

struct HuntFinding {
  CaseResult found;            // the drawn case's result
  FailureClass kind;           // its failure class
  ShrinkResult shrunk;         // when options.shrink (status not ok: not shrunk)
  int64_t after_cases = 0;     // cases run when it was found (this one included)
  double after_seconds = 0.0;  // the hunt's time then (shrinks of earlier findings included)
  std::string minimal_id() const;
};

struct HuntResult {
  int64_t drawn = 0, rejected = 0, filtered = 0, run = 0, unsupported = 0;
  int64_t failures = 0;  // failing results, each class counted once in findings
  std::vector<HuntFinding> findings;
  double seconds = 0.0;
};

// Hunts on `backend`. Throws std::invalid_argument for a bad filter, op or shard.
HuntResult hunt(Backend& backend, const HuntOptions& options);

}  // namespace deltacheck::harness
