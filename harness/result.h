// Results of running one case on one backend: verdict, metrics per output tensor and per packed
// sequence, thresholds, leak details and probe results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/compare.h"
#include "harness/tolerance.h"

namespace deltacheck::harness {

enum class Verdict { kPass, kFail, kLeak, kError, kUnsupported, kSkipped };
const char* verdict_name(Verdict v);
Verdict verdict_from_name(const std::string& s);  // throws std::invalid_argument
// Whether a verdict fails the gate by default (fail, leak, error).
bool is_failure(Verdict v);

struct SeqReport {
  int64_t seq = 0;
  int64_t length = 0;
  Metrics metrics;
  Threshold threshold{};  // zero for empty sequences (nothing to judge)
  RoundingBias bias;      // the sign test of rounding bias (unchecked outside bf16 / fp16)
  bool ok = true;
  int64_t first_bad_token = -1;  // within the sequence; -1 when none or not token-indexed
};

struct TensorReport {
  std::string name;
  std::string dtype;
  bool exact = false;  // compared bit-exactly: metrics.count elements, `mismatches` differ
  int64_t mismatches = 0;
  Metrics metrics;
  Metrics baseline;           // the same-precision baselines' worst error, which sets the threshold
  std::string baseline_name;  // the baseline with the largest relative RMS, e.g. "chunked fp32"
  Threshold threshold{};
  RoundingBias bias;  // the sign test of rounding bias (unchecked outside bf16 / fp16)
  bool ok = true;
  std::vector<SeqReport> seqs;
  std::vector<double> token_error;  // largest |Δ| per token (token-indexed tensors only)
  // Largest |Δ| per head and token ([head][token]) of failing [B, T, heads, D] tensors, for the
  // report's per-head plots.
  std::vector<std::vector<double>> head_token_error;
};

struct ProbeReport {
  std::string name;  // isolation, alone, order, split, repeat
  Verdict verdict = Verdict::kPass;
  std::string detail;
};

struct CaseResult {
  std::string case_id;
  std::string op;
  std::string backend;
  // The backend's declared precision profile: "fp32" (default), "tf32", "chunk=128,..."
  // (ops/precision.h, profile_name).
  std::string precision = "fp32";
  Verdict verdict = Verdict::kSkipped;
  std::string message;  // the one-line reason (failure message, error, unsupported reason)
  std::vector<TensorReport> tensors;
  std::vector<ProbeReport> probes;
  std::vector<int64_t> seq_lengths;
  // Leak details (verdict leak): the first wrong sequence and token, and its max |Δ|.
  int64_t leak_seq = -1;
  int64_t leak_token = -1;
  double leak_max_abs = 0.0;
  double seconds_backend = 0.0;
  double seconds_total = 0.0;
  // The worst relative-RMS ratio to its threshold over all tensors (what the table shows).
  std::string worst_tensor;
  double worst_rel_rms = 0.0;
  double worst_threshold = 0.0;
  // Largest error / threshold ratio over every tensor, sequence and metric (< 1 means pass;
  // how close a pass came to failing).
  double margin = 0.0;
};

// "A pass needs its probes": the leak probes of a result that the backend declined, comma-separated
// ("repeat, isolation, alone, order"), when it declined every probe that ran (a declined probe is
// the one kind that is skipped: probes.h); "" when it ran one, or none was run (--no-probes, an op
// without probes). Reports print a pass with declined probes as "pass (probes declined: ...)".
std::string declined_probes(const CaseResult& r);

}  // namespace deltacheck::harness
