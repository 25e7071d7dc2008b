// Tolerance constants. Changing any number here changes TolerancePolicy::kId.
#include "harness/tolerance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace deltacheck::harness {

DTypeTolerance dtype_tolerance(cases::DType t) {
  switch (t) {
    case cases::DType::kBF16:
      // Ceiling 1e-2 (tol-v2: 5e-3): the chunked form with bf16 operands is 4.4e-3 off in o
      // on zero gates over 129 tokens (gdr(layout=single[129],dtype=bf16,gate=zero,seed=92)).
      return {1e-3, 1.0 / 256, 1e-2, 9.2e-41};  // 1 ulp of bf16 at max|ref|
    case cases::DType::kF16:
      return {2e-4, 1.0 / 2048, 2e-3, 5.97e-8};  // 1 ulp of fp16
    default:
      return {2e-6, 4e-6, 1e-4, 1.4e-45};  // fp32 and wider
  }
}

namespace {
// kFactor x the baseline's own errors plus the dtype's floors, before any ceiling.
Threshold from_baseline(const DTypeTolerance& d, double base_rel, double base_abs,
                        double ref_max_abs) {
  Threshold th;
  th.rel_rms = TolerancePolicy::kFactor * base_rel + d.rel_floor;
  th.max_abs = TolerancePolicy::kFactor * base_abs + d.abs_floor_frac * ref_max_abs;
  th.resolution = d.resolution;
  return th;
}
}  // namespace

Threshold threshold(cases::DType t, double base_rel, double base_abs, double ref_max_abs,
                    double ceiling_factor, std::optional<cases::DType> storage) {
  const DTypeTolerance d = dtype_tolerance(t);
  Threshold th =
      from_baseline(dtype_tolerance(storage.value_or(t)), base_rel, base_abs, ref_max_abs);
  th.rel_rms = std::min(ceiling_factor * d.rel_ceiling, th.rel_rms);
  return th;
}

Threshold sequence_threshold(cases::DType t, double base_rel, double base_abs,
                             const SequenceScale& scale, const Threshold& tensor) {
  const DTypeTolerance d = dtype_tolerance(t);
  Threshold th = from_baseline(d, base_rel, base_abs, scale.ref_max_abs);
  th.rel_rms = std::max(tensor.rel_rms, th.rel_rms);
  if (scale.ref_rms > 0 && scale.tensor_ref_rms > scale.ref_rms)
    th.rel_rms = std::max(th.rel_rms, tensor.rel_rms * scale.tensor_ref_rms / scale.ref_rms);
  // No element of a sequence need be closer than the tensor allows its worst element: a
  // baseline's max |Δ| on a few hundred values is a small sample of its error.
  th.max_abs = std::max(th.max_abs, tensor.max_abs);
  return th;
}

bool within(const Threshold& t, double rel_rms, double max_abs, int64_t non_finite) {
  if (non_finite > 0) return false;
  if (max_abs <= t.resolution) return true;
  return rel_rms <= t.rel_rms && max_abs <= t.max_abs;
}

const char* bias_direction_name(BiasDirection d) {
  switch (d) {
    case BiasDirection::kTowardZero:
      return "toward zero";
    case BiasDirection::kAwayFromZero:
      return "away from zero";
    case BiasDirection::kUp:
      return "up";
    case BiasDirection::kDown:
      return "down";
  }
  return "?";
}

bool checks_rounding_bias(cases::DType storage) {
  return storage == cases::DType::kBF16 || storage == cases::DType::kF16;
}

RoundingBias rounding_bias(cases::DType storage, const ErrorSigns& s, const Metrics& m) {
  RoundingBias b;
  if (!checks_rounding_bias(storage) || m.non_finite > 0 ||
      !(m.max_abs > dtype_tolerance(storage).resolution))
    return b;
  // One test: `k` of the `n` errors one way, rows' (k_r - (n_r - k_r))^2 summing to `sq`. The
  // z-score sum_r d_r / sqrt(sum_r d_r^2) is the binomial one, (2k - n) / sqrt(n), when the
  // elements are independent, and stays N(0, 1) when the rows are but their elements are not.
  auto test = [&](int64_t k, int64_t n, int64_t sq, BiasDirection one_way,
                  BiasDirection other_way) {
    if (n <= 0 || sq <= 0) return;
    const bool first = 2 * k >= n;
    const double z = std::fabs(2.0 * static_cast<double>(k) - static_cast<double>(n)) /
                     std::sqrt(static_cast<double>(sq));
    if (b.checked && z <= b.z) return;
    b.checked = true;
    b.direction = first ? one_way : other_way;
    b.n = n;
    b.fraction = static_cast<double>(first ? k : n - k) / static_cast<double>(n);
    b.z = z;
  };
  test(s.toward_zero, s.toward_zero + s.away_from_zero, s.zero_sq, BiasDirection::kTowardZero,
       BiasDirection::kAwayFromZero);
  test(s.up, s.up + s.down, s.up_sq, BiasDirection::kUp, BiasDirection::kDown);
  b.rows = s.rows;
  b.biased =
      b.checked && b.fraction >= RoundingBiasRule::kBiasFraction && b.z >= RoundingBiasRule::kBiasZ;
  return b;
}

double bias_margin(const RoundingBias& b) {
  if (!b.checked) return 0.0;
  return std::min(b.fraction / RoundingBiasRule::kBiasFraction, b.z / RoundingBiasRule::kBiasZ);
}

std::string describe_bias(const RoundingBias& b, const std::string& dtype,
                          const std::string& what) {
  const char* verb = b.direction == BiasDirection::kTowardZero     ? "shrink"
                     : b.direction == BiasDirection::kAwayFromZero ? "grow"
                     : b.direction == BiasDirection::kUp           ? "are too high"
                                                                   : "are too low";
  const char* hint = b.direction == BiasDirection::kTowardZero
                         ? "truncation instead of round-to-nearest?"
                         : "a directed rounding instead of round-to-nearest?";
  return fmt::format("{} {} biased {}: {:.0f}% of {} elements {} (z = {:.0f} over {} rows); {}",
                     dtype, what, bias_direction_name(b.direction), 100.0 * b.fraction, b.n, verb,
                     b.z, b.rows, hint);
}

std::string describe_policy() {
  return fmt::format(
      "{}: err <= {} x max err(fp32 recurrence, fp32 chunked with running and independent "
      "prefix sums, chunked with activation-dtype operands; the declared profile's baselines) "
      "+ floor, rel_rms ceiling "
      "fp32 {:.0e} / bf16 {:.0e} / fp16 {:.0e} per tensor (x2 for the whole layer); bf16/fp16 "
      "outputs fail a sign test of "
      "rounding bias at >= {:.0f}% of errors one way with z >= {:.0f}",
      TolerancePolicy::kId, TolerancePolicy::kFactor,
      dtype_tolerance(cases::DType::kF32).rel_ceiling,
      dtype_tolerance(cases::DType::kBF16).rel_ceiling,
      dtype_tolerance(cases::DType::kF16).rel_ceiling, 100 * RoundingBiasRule::kBiasFraction,
      RoundingBiasRule::kBiasZ);
}

}  // namespace deltacheck::harness
