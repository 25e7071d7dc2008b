// Tolerance constants. Changing any number here changes TolerancePolicy::kId.
#include "harness/tolerance.h"

#include <fmt/format.h>

#include <algorithm>
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

std::string describe_policy() {
  return fmt::format(
      "{}: err <= {} x max err(fp32 recurrence, fp32 chunked with running and independent "
      "prefix sums, chunked with activation-dtype operands; the declared profile's baselines) "
      "+ floor, rel_rms ceiling "
      "fp32 {:.0e} / bf16 {:.0e} / fp16 {:.0e} per tensor (x2 for the whole layer)",
      TolerancePolicy::kId, TolerancePolicy::kFactor,
      dtype_tolerance(cases::DType::kF32).rel_ceiling,
      dtype_tolerance(cases::DType::kBF16).rel_ceiling,
      dtype_tolerance(cases::DType::kF16).rel_ceiling);
}

}  // namespace deltacheck::harness
