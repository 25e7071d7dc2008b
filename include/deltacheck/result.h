// Verdicts and metrics: what running one case on one backend gives. A CaseResult holds the
// verdict, a one-line reason, and per output tensor and per packed sequence the error metrics
// against the FP64 oracle with the thresholds they were judged by.
#pragma once

#include <string>
#include <vector>

#include "harness/compare.h"
#include "harness/result.h"
#include "harness/tolerance.h"

namespace deltacheck {

// kPass, kFail (numbers wrong), kLeak (a failure confined to a packed sequence after the first,
// confirmed by running that sequence alone, which passes), kError (threw, returned an error,
// left outputs unwritten or wrote outside them), kUnsupported (the backend declined, with the
// reason), kSkipped.
using Verdict = harness::Verdict;
using harness::is_failure;         // fail, leak, error: what fails a gate by default
using harness::verdict_from_name;  // "leak" -> Verdict::kLeak; throws std::invalid_argument
using harness::verdict_name;       // Verdict::kLeak -> "leak"

// Error metrics of an output (or a part of it) against the oracle: max_abs (and its flat index),
// rel_rms = ||actual - expected|| / ||expected||, nmse, non_finite.
using Metrics = harness::Metrics;
// What a tensor or sequence was allowed: rel_rms and max_abs (2x the same-precision baseline's
// error plus a floor, below a per-dtype ceiling; tolerance_policy() says the rule).
using Threshold = harness::Threshold;
// Per packed sequence: seq, length, metrics, threshold, ok, first_bad_token.
using SeqReport = harness::SeqReport;
// Per output tensor (o, final_state, ...): name, dtype, metrics, baseline, threshold, ok, seqs.
using TensorReport = harness::TensorReport;
// The oracle-free leakage probes (isolation, alone, order, split, repeat): name, verdict, detail.
using ProbeReport = harness::ProbeReport;
// One (case, backend): case_id, op, backend, verdict, message, tensors, probes, seq_lengths,
// leak_seq / leak_token / leak_max_abs (verdict leak), worst_tensor / worst_rel_rms /
// worst_threshold, margin (largest error / threshold ratio: < 1 passes), timings.
using CaseResult = harness::CaseResult;

// The tolerance policy with its id and constants, e.g. "tol-v1 (...)"; printed with every run.
std::string tolerance_policy();

}  // namespace deltacheck
