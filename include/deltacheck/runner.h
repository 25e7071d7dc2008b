// Running cases on backends: for each case deltacheck generates the inputs, computes the FP64
// expectation and the same-precision baseline (which sets the tolerance), runs the backend into
// poisoned, guarded outputs, judges the result per tensor and per packed sequence, confirms a
// leak by rerunning the sequence alone, and runs the oracle-free leakage probes. This is what
// `deltacheck run` does, without the console and the files.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "deltacheck/backend.h"
#include "deltacheck/case.h"
#include "deltacheck/result.h"

namespace deltacheck {

struct RunOptions {
  int jobs = 1;        // cases prepared and run concurrently (backends must then be thread-safe)
  bool probes = true;  // the leakage probes (isolation, alone, order, split, repeat)
};

// Called once per (case, backend) as results come, in case order, from one thread (a reporter
// thread of run(), not the caller's).
using ResultCallback = std::function<void(const CaseResult&)>;

// One case on one backend. Never throws for what the backend does (that is a verdict); a case
// that cannot be prepared is verdict error.
CaseResult run_case(const Case& c, Backend& backend, const RunOptions& options = {});

// Every case on every backend, streaming (each case is prepared, run and released before the
// next); the results in case order, backends in the order given.
std::vector<CaseResult> run(const std::vector<Case>& cases, const std::vector<Backend*>& backends,
                            const RunOptions& options = {},
                            const ResultCallback& on_result = nullptr);
// The selected cases on one backend; throws what select() throws.
std::vector<CaseResult> run(const Selection& selection, Backend& backend,
                            const RunOptions& options = {},
                            const ResultCallback& on_result = nullptr);

}  // namespace deltacheck
