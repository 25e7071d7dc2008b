// The runner: prepares each case once (inputs, FP64 expectation, baseline), runs every backend on
// it into poisoned, guarded outputs, and judges the result.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/tensor.h"
#include "harness/backend.h"
#include "harness/compare.h"
#include "harness/expectation_cache.h"
#include "harness/input_check.h"
#include "harness/op_names.h"
#include "harness/result.h"

namespace deltacheck::harness {

struct PreparedCase {
  cases::Case c;
  cases::TensorMap inputs;
  Values expected;
  std::vector<Baseline> baselines;
  std::vector<OutputSpec> outputs;
  // The baselines' worst errors, per output: [0] the whole tensor, then one per SeqSlice in the
  // operation's order. Filled by prepare() so judging several backends (and probes) measures the
  // baselines once; judge() computes them when absent.
  BaselineErrors baseline_errors = {};
  // The precision profile the baselines are of (a case is re-prepared with a backend's declared
  // profile, ops/precision.h).
  PrecisionProfile precision = PrecisionProfile{};
  // Where the probes look up and store what they derive from the case (null: no cache).
  std::shared_ptr<const ExpectationCache> cache = nullptr;
  // The case's own cache entry, computed by prepare(..., defer_store = true) and written by
  // write_cache_entry() once the case's calls are done (null: none to write).
  std::shared_ptr<ExpectationCache::Unwritten> unwritten = nullptr;
  // With one job: the next case is prepared on another thread while this one runs, and each
  // probe call's inputs while the call before it runs (run_all).
  bool prepare_ahead = false;
  // A copy of `inputs` for backends that checks_inputs() (input_check.h), taken where the case is
  // prepared; null when none of the run's backends checks (each call then copies for itself).
  std::shared_ptr<const InputCopy> inputs_copy = nullptr;
};

// The baselines' worst errors of every output of a prepared case (fills pc.baseline_errors).
void measure_baselines(PreparedCase& pc);

// For failure dumps: per output, the values of the baseline that set its threshold.
Values worst_baseline(const PreparedCase& pc);

// pc's baselines: pc.baselines, or recomputed when a cached preparation kept only their errors.
std::vector<Baseline> baselines_of(const PreparedCase& pc);
// An operation's baselines for a case; for a multi-call case (cache=chunked, dynamic) also each
// baseline run through the case's call plan, as a kernel is driven (docs/tolerance.md, "Cases in
// several calls").
std::vector<Baseline> case_baselines(const cases::Case& c, const cases::TensorMap& inputs,
                                     const PrecisionProfile& precision);

// Generates inputs and computes the oracle and baseline. Throws on invalid cases. `salts`
// regenerate chosen sequences (cases::GenOptions). With a cache, reads them from it when a run
// of the same build prepared the same case before (harness/expectation_cache.h), else stores
// them there: at once, or with `defer_store` when write_cache_entry() is called (run_all: after
// the case's calls, so no entry of a case exists while a candidate runs it on a cold run).
PreparedCase prepare(const cases::Case& c, const cases::GenOptions& options = {},
                     std::shared_ptr<const ExpectationCache> cache = nullptr,
                     bool defer_store = false);
// Writes the cache entry prepare(..., defer_store = true) left in pc (once; nothing when none).
void write_cache_entry(const PreparedCase& pc);

// Allocates a case's outputs with guard bands, poisoned.
cases::TensorMap allocate_outputs(const std::vector<OutputSpec>& specs);

// Checks outputs for writes outside them, unwritten elements and non-finite values, then compares
// numbers to the expectation and decides the verdict.
// A case whose every expected output is zero cannot tell right from "writes zeros" and is an
// error, unless allow_degenerate (a zero-length sequence checked alone).
CaseResult judge(const PreparedCase& pc, const cases::TensorMap& outputs,
                 const std::string& backend_name, bool allow_degenerate = false);

// Called for a result judged fail, leak or error, with the outputs the backend wrote (failure
// dumps). Runs on the worker thread that ran the case, so it may be called concurrently.
using FailureCallback =
    std::function<void(const PreparedCase&, const cases::TensorMap& outputs, const CaseResult&)>;

// Runs one backend on one prepared case (catching everything the backend throws), then, when
// `probes`, the oracle-free leakage probes (harness/probes.h); failing results go to on_failure.
// `prepare_ahead`: each probe call's inputs are built while the call before it runs.
// `require_probes` (RunOptions::require_probes): a pass whose probes were all declined is an error.
CaseResult run_case(const PreparedCase& pc, Backend& backend, bool probes = false,
                    const FailureCallback& on_failure = nullptr, bool prepare_ahead = false,
                    bool require_probes = false);

// Folds probe verdicts into the case verdict (probe leak -> leak; probe fail -> fail).
void merge_probe_verdicts(CaseResult& r);

// A prepared case made of pieces of another (alone, reordered, split), with the expectation and
// baseline cut from the original's (Piece: ops/repack.h, through harness/op_names.h).
PreparedCase prepare_pieces(const PreparedCase& pc, const std::vector<Piece>& pieces);

// For a result judged leak: reruns the first wrong sequence alone and turns the verdict into fail
// when that sequence is wrong by itself too. For a result judged fail whose first wrong sequence
// is the first of a pack: reruns it alone and turns the verdict into leak when it is right by
// itself (a later sequence leaks into it).
void confirm_leak(const PreparedCase& pc, Backend& backend, CaseResult& r);

struct RunOptions {
  int jobs = 1;                // cases prepared and run concurrently
  bool probes = true;          // run the leakage probes after each oracle comparison
  FailureCallback on_failure;  // see FailureCallback; null: none
  // Cases whose estimated memory exceeds this many bytes are skipped before anything is
  // allocated (harness/limits.h, --max-memory); 0: no limit.
  int64_t max_memory_bytes = 0;
  // The cross-run expectation cache (harness/expectation_cache.h); null: none.
  std::shared_ptr<const ExpectationCache> cache = nullptr;
  // With one job: the next case is prepared on another thread while this one runs, and each
  // probe call's inputs while the call before it runs (run_all).
  bool prepare_ahead = false;
  // A pass needs its probes: a case whose every leak probe the backend declined (probes.h) is
  // verdict error instead of pass. Set where the user asked for the probes (the tool: with
  // --deterministic or --batch-invariant); otherwise such a pass is only reported as one.
  bool require_probes = false;
};

// Runs every case on every backend, streaming: each case is prepared, run and released before
// the next. on_result is called once per (case, backend), in case order.
std::vector<CaseResult> run_all(const std::vector<cases::Case>& cases,
                                const std::vector<Backend*>& backends, const RunOptions& options,
                                const std::function<void(const CaseResult&)>& on_result);

}  // namespace deltacheck::harness
