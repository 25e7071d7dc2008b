// Running cases on backends: for each case deltacheck generates the inputs, computes the FP64
// expectation and the same-precision baseline (which sets the tolerance), runs the backend into
// poisoned, guarded outputs, judges the result per tensor and per packed sequence, confirms a
// leak by rerunning the sequence alone, and runs the oracle-free leakage probes. This is what
// `deltacheck run` does, without the console and the files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deltacheck/backend.h"
#include "deltacheck/case.h"
#include "deltacheck/result.h"
#include "harness/limits.h"
#include "harness/runner.h"

namespace deltacheck {

// The cross-run expectation cache; open_expectation_cache(dir) opens it and its key (null for
// ""), throwing std::runtime_error with one line naming what is unusable: a caller can check
// before printing anything.
using harness::ExpectationCache;
using harness::open_expectation_cache;

// A case ready to run: the case, its inputs, the FP64 expectation, the output specs and the
// same-precision baselines (what a failure dump stores; prepare_stored() in deltacheck/golden.h
// makes one of a stored case).
using PreparedCase = harness::PreparedCase;
// Called for each result judged fail, leak or error with its prepared case and the outputs the
// backend wrote (e.g. for write_failure_dump in deltacheck/report.h), on the worker thread that
// ran the case: concurrently when jobs > 1.
using FailureCallback = harness::FailureCallback;

struct RunOptions {
  int jobs = 1;        // cases prepared and run concurrently (backends must then be thread-safe)
  bool probes = true;  // the leakage probes (isolation, alone, order, split, repeat)
  // A case whose estimated memory exceeds this many bytes is skipped (verdict skipped, with the
  // reason) before anything is allocated; 0: no limit. See memory_refusal.
  int64_t max_memory_bytes = 0;
  FailureCallback on_failure;  // null: none
  // A directory for the cross-run expectation cache ("" : none): inputs, FP64 expectations and
  // baselines of cases prepared before by the same build are read instead of recomputed
  // (docs/performance.md, "Expectation cache"). Verdicts are identical with and without it.
  // Entries are encrypted and authenticated with the key of DELTACHECK_CACHE_KEY_FILE (default
  // $XDG_STATE_HOME or ~/.local/state: deltacheck/cache.key, made on first use); run() throws
  // std::runtime_error when the directory or the key file is unusable.
  std::string cache_dir;
  // The cache opened already (open_expectation_cache): used instead of cache_dir when set.
  std::shared_ptr<const ExpectationCache> cache = nullptr;
  // With one job: the next case is prepared (inputs, expectation, baselines) on another thread
  // while the current one runs, so a backend that leaves the CPU to deltacheck (a Python
  // callable, an external program, a GPU kernel) waits less between cases. Backends are still
  // called from one thread, in case order; results are identical. Costs one more case's memory.
  bool prepare_ahead = false;
  // A pass needs its probes: a case whose every leak probe the backend declined (answered
  // unsupported for each variation) is verdict error instead of pass. Without it such a pass
  // stays a pass, printed as "pass (probes declined: ...)" and counted in the totals.
  bool require_probes = false;
};

// Memory limits (`--max-memory`): the default, half the machine's RAM; a size from text ("16G",
// "512M", "1.5GiB", "25%" of RAM, "none" or "0": no limit; throws std::invalid_argument); bytes
// as text ("1.2 GB"); and why a case would not fit in `limit_bytes` ("" when it fits: the
// estimate from its shapes, nothing allocated).
using harness::default_max_memory_bytes;
using harness::format_bytes;
using harness::memory_refusal;
using harness::parse_memory_size;

// Called once per (case, backend) as results come, in case order, from one thread (a reporter
// thread of run(), not the caller's).
using ResultCallback = std::function<void(const CaseResult&)>;

// One case on one backend. Never throws for what the backend does (that is a verdict); a case
// that cannot be prepared is verdict error.
CaseResult run_case(const Case& c, Backend& backend, const RunOptions& options = {});
// One prepared case on one backend (a golden fixture's stored case: prepare_stored); `jobs` and
// `max_memory_bytes` do not apply.
CaseResult run_case(const PreparedCase& prepared, Backend& backend, const RunOptions& options = {});

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
