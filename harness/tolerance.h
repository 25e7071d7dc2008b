// The tolerance policy, in one place and versioned. An implementation may be at most kFactor
// times as far from the FP64 oracle as the worst straightforward implementation of the same rule
// in real use in the same precision (the baselines: rule_baselines below), plus a small floor, and
// never beyond an absolute ceiling per dtype. Every result prints the thresholds it was judged by
// and which baseline set them. docs/tolerance.md gives the numbers behind each constant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cases/tensor.h"
#include "harness/compare.h"
#include "ops/precision.h"

namespace deltacheck::harness {

struct TolerancePolicy {
  static constexpr const char* kId = "tol-v4";
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

// Threshold for a tensor given the baselines' worst errors. `t` is the precision the tensor is
// computed in (its ceiling); `storage`, when given, the dtype it is stored in, whose floors apply
// (an fp32 state computed from bf16 activations keeps fp32's floors: what separates a state
// stored in bf16 from one computed with bf16 matmul operands is the baseline, not the floor).
// `ceiling_factor` widens the ceiling for outputs that pass through several rounding stages by
// design (the whole layer: conv, gates, rule and norm each round to the activation dtype).
Threshold threshold(cases::DType t, double baseline_rel_rms, double baseline_max_abs,
                    double ref_max_abs, double ceiling_factor = 1.0,
                    std::optional<cases::DType> storage = std::nullopt);

// Threshold for one packed sequence's part of a tensor. The larger of: the baseline on this
// sequence (times kFactor, plus the floor); the tensor's relative threshold (a short sequence's
// own baseline error is a small sample); and, for sequences whose values are small against the
// tensor's (one token, one value, a cancellation), errors per element as large as the tensor may
// have on average: rel_rms * tensor_ref_rms / seq_ref_rms. Its max |Δ| threshold is at least the
// tensor's (a baseline's max |Δ| on a few values is a small sample of its error). A relative error
// on a handful of tiny values is noise; a leak moves a sequence by the tensor's own scale and stays
// far above all three. The ceiling bounds the tensor, not the sequence: on a sequence of a few
// hundred values the straightforward implementation itself can exceed it (one bf16 token through
// the whole layer: 2.3e-2 against a ceiling of 1e-2).
struct SequenceScale {
  double ref_max_abs;  // of the sequence
  double ref_rms;      // of the sequence
  double tensor_ref_max_abs;
  double tensor_ref_rms;
};
Threshold sequence_threshold(cases::DType t, double baseline_rel_rms, double baseline_max_abs,
                             const SequenceScale& scale, const Threshold& tensor);

// The rounding-bias check (docs/tolerance.md#rounding-bias): a sign test of the errors of an
// output stored in bf16 or fp16, whose storage rounding (half an ulp, 2e-3 / 2.4e-4 relative)
// dominates a correct kernel's arithmetic error. Rounded to nearest, an element's error is as
// likely toward zero as away from it, and as likely up as down; stored by truncation (round
// toward zero), nearly every element shrinks, and rounded toward +/-inf nearly every one moves
// that way. Biased when, among the elements whose error is not zero, the fraction in one
// direction is at least kBiasFraction and its z-score against 1/2 at least kBiasZ. The z-score
// takes rows (compare.h's ErrorSigns), not elements, as the independent units: a correct
// kernel's arithmetic errors move a row together (one rounding of a head's state or of q.k
// scales a token's whole output), so that a one-token sequence of a kernel with bf16 operands
// has 77-89% of its 256 elements one way. The fraction bounds what an error shared by every row
// can do (a scale rounded once); the z-score needs at least kBiasZ^2 rows.
struct RoundingBiasRule {
  static constexpr double kBiasFraction = 0.75;
  static constexpr double kBiasZ = 6.0;
};

enum class BiasDirection { kTowardZero, kAwayFromZero, kUp, kDown };
const char* bias_direction_name(BiasDirection d);  // "toward zero", "away from zero", "up", "down"

struct RoundingBias {
  bool checked = false;  // the output is stored in bf16 or fp16 and has non-zero errors
  bool biased = false;
  // The more lopsided of the two tests (toward / away from zero, up / down; the larger z): its
  // direction, the fraction of the non-zero errors that go that way and its z-score, counted
  // by rows (rounding_bias()).
  BiasDirection direction = BiasDirection::kTowardZero;
  double fraction = 0.5;
  double z = 0.0;
  int64_t n = 0;     // elements counted by that test
  int64_t rows = 0;  // rows with a non-zero error
};

// The check on the error signs and metrics of an output (or one sequence of it) stored in
// `storage`. Only bf16 and fp16 are checked (fp32's storage rounding is as small as a correct
// kernel's arithmetic error: an fp32 kernel that scales every output by 1 - 1e-7 shrinks them
// all); errors within the dtype's resolution, and non-finite outputs, are not judged.
bool checks_rounding_bias(cases::DType storage);
RoundingBias rounding_bias(cases::DType storage, const ErrorSigns& s, const Metrics& m);
// How close a result came to being biased: min(fraction / kBiasFraction, z / kBiasZ), >= 1 when
// biased (0 when unchecked).
double bias_margin(const RoundingBias& b);

// "bf16 o biased toward zero: 100% of 16512 elements shrink (z = 16 over 258 rows); truncation
// instead of round-to-nearest?" (`what` names the tensor or sequence).
std::string describe_bias(const RoundingBias& b, const std::string& dtype, const std::string& what);

std::string describe_policy();

// The precision profile a backend declares (with its matmul precision) and the rule's baseline
// formulations live with the operations (ops/precision.h); the harness names them as before.
using ops::matmul_precision_from_name;
using ops::matmul_precision_name;
using ops::MatmulPrecision;
using ops::merged;
using ops::PrecisionProfile;
using ops::profile_from_name;
using ops::profile_name;
using ops::rule_baselines;

}  // namespace deltacheck::harness
