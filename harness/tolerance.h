// The tolerance policy, in one place and versioned. An implementation may be at most kFactor
// times as far from the FP64 oracle as a straightforward implementation of the same rule in the
// same precision (the baseline), plus a small floor, and never beyond an absolute ceiling per
// dtype. Every result prints the thresholds it was judged by.
#pragma once

#include <cstdint>
#include <string>

#include "cases/tensor.h"

namespace deltacheck::harness {

struct TolerancePolicy {
  static constexpr const char* kId = "tol-v2";
  static constexpr double kFactor = 2.0;
};

// Per-dtype constants: floor on relative RMS, floor on max |Δ| as a fraction of max |ref|, and the
// relative-RMS ceiling nothing may exceed.
struct DTypeTolerance {
  double rel_floor;
  double abs_floor_frac;
  double rel_ceiling;
  // Errors no larger than the dtype's smallest subnormal are below what it can represent: a
  // tensor or sequence whose max |Δ| is within it passes whatever its relative error (a state
  // decayed to 1e-59 that fp32 flushes to zero is right).
  double resolution;
};
DTypeTolerance dtype_tolerance(cases::DType t);

struct Threshold {
  double rel_rms;     // allowed relative RMS error
  double max_abs;     // allowed max |Δ|
  double resolution;  // max |Δ| at or below this passes outright
};

// Whether errors (rel_rms, max_abs, non-finite count) are within a threshold.
bool within(const Threshold& t, double rel_rms, double max_abs, int64_t non_finite);

// Threshold for a tensor given the baseline's own errors.
// `ceiling_factor` widens the ceiling for outputs that pass through several rounding stages by
// design (the whole layer: conv, gates, rule and norm each round to the activation dtype).
Threshold threshold(cases::DType t, double baseline_rel_rms, double baseline_max_abs,
                    double ref_max_abs, double ceiling_factor = 1.0);

// Threshold for one packed sequence's part of a tensor: as far off, relatively, as the tensor as
// a whole may be (a short sequence's own baseline error is a small sample), or as the baseline
// is on this sequence (times kFactor, plus the floor). The ceiling bounds the tensor, not the
// sequence: on a sequence of a few hundred values the straightforward implementation itself can
// exceed it (one bf16 token through the whole layer: 2.3e-2 against a ceiling of 1e-2).
Threshold sequence_threshold(cases::DType t, double baseline_rel_rms, double baseline_max_abs,
                             double ref_max_abs, const Threshold& tensor);

std::string describe_policy();

}  // namespace deltacheck::harness
