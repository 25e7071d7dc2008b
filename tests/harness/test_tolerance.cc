// The tolerance rule (harness/tolerance.h): thresholds from the baseline's own errors, the
// per-dtype ceiling on a tensor, and per-sequence thresholds that are never tighter than their
// tensor's and follow the baseline on the sequence past the ceiling.
#include <gtest/gtest.h>

#include "harness/tolerance.h"

namespace deltacheck::harness {
namespace {

using cases::DType;

TEST(Tolerance, TensorThresholdIsTwiceTheBaselinePlusTheFloorBelowTheCeiling) {
  const DTypeTolerance d = dtype_tolerance(DType::kBF16);
  Threshold t = threshold(DType::kBF16, 1e-3, 0.01, 4.0);
  EXPECT_DOUBLE_EQ(t.rel_rms, 2 * 1e-3 + d.rel_floor);
  EXPECT_DOUBLE_EQ(t.max_abs, 2 * 0.01 + d.abs_floor_frac * 4.0);
  // A baseline far off cannot loosen a tensor's threshold past the ceiling ...
  t = threshold(DType::kBF16, 0.5, 0.01, 4.0);
  EXPECT_DOUBLE_EQ(t.rel_rms, d.rel_ceiling);
  // ... which the whole layer widens by its factor.
  EXPECT_DOUBLE_EQ(threshold(DType::kBF16, 0.5, 0.01, 4.0, 2.0).rel_rms, 2 * d.rel_ceiling);
}

TEST(Tolerance, SequenceThresholdIsNeverTighterThanItsTensors) {
  const Threshold tensor = threshold(DType::kF32, 3e-7, 1e-6, 2.0);
  // A short sequence with a luckily exact baseline still gets the tensor's relative threshold.
  const Threshold s = sequence_threshold(DType::kF32, 0.0, 0.0, 2.0, tensor);
  EXPECT_DOUBLE_EQ(s.rel_rms, tensor.rel_rms);
  // Its max |Δ| threshold is its own (a leak into it is measured against its own values).
  EXPECT_LT(s.max_abs, tensor.max_abs);
}

TEST(Tolerance, SequenceThresholdFollowsTheBaselinePastTheCeiling) {
  const DTypeTolerance d = dtype_tolerance(DType::kBF16);
  const Threshold tensor = threshold(DType::kBF16, 3.8e-3, 0.145, 11.8, 2.0);
  EXPECT_LE(tensor.rel_rms, 2 * d.rel_ceiling);
  // One bf16 token through the layer: the straightforward implementation is 2.3e-2 off.
  const Threshold s = sequence_threshold(DType::kBF16, 2.3e-2, 0.145, 5.8, tensor);
  EXPECT_DOUBLE_EQ(s.rel_rms, 2 * 2.3e-2 + d.rel_floor);
  EXPECT_TRUE(within(s, 2.3e-2, 0.145, 0));
  // Twice as far off as the baseline plus the floor is still a failure there.
  EXPECT_FALSE(within(s, 2 * 2.3e-2 + 2 * d.rel_floor, 0.145, 0));
  EXPECT_FALSE(within(s, 2.3e-2, 0.145, 1));  // and so is any non-finite value
}

}  // namespace
}  // namespace deltacheck::harness
