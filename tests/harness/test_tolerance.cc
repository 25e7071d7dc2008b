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
  const Threshold s = sequence_threshold(DType::kF32, 0.0, 0.0, {2.0, 1.0, 2.0, 1.0}, tensor);
  EXPECT_DOUBLE_EQ(s.rel_rms, tensor.rel_rms);
  // Its max |Δ| threshold is at least the tensor's.
  EXPECT_DOUBLE_EQ(s.max_abs, tensor.max_abs);
}

TEST(Tolerance, SequenceThresholdFollowsTheBaselinePastTheCeiling) {
  const DTypeTolerance d = dtype_tolerance(DType::kBF16);
  const Threshold tensor = threshold(DType::kBF16, 3.8e-3, 0.145, 11.8, 2.0);
  EXPECT_LE(tensor.rel_rms, 2 * d.rel_ceiling);
  // One bf16 token through the layer: the straightforward implementation is 2.3e-2 off.
  const Threshold s =
      sequence_threshold(DType::kBF16, 2.3e-2, 0.145, {5.8, 2.0, 11.8, 2.0}, tensor);
  EXPECT_DOUBLE_EQ(s.rel_rms, 2 * 2.3e-2 + d.rel_floor);
  EXPECT_TRUE(within(s, 2.3e-2, 0.145, 0));
  // Twice as far off as the baseline plus the floor is still a failure there.
  EXPECT_FALSE(within(s, 2 * 2.3e-2 + 2 * d.rel_floor, 0.145, 0));
  EXPECT_FALSE(within(s, 2.3e-2, 0.145, 1));  // and so is any non-finite value
}

TEST(Tolerance, ATinySequenceMayHaveTheTensorsErrorPerElement) {
  // gdr(layout=packed[1*4000],K=1,V=1): one value per sequence. A sequence whose one value is
  // small against the tensor's (here 1/20 of its RMS) may be off by what an average element of
  // the tensor may be off, not by a relative error of that one value.
  const Threshold tensor = threshold(DType::kF32, 1e-7, 1e-6, 2.0);
  const SequenceScale tiny{0.02, 0.02, 2.0, 1.0};
  const Threshold s = sequence_threshold(DType::kF32, 0.0, 0.0, tiny, tensor);
  EXPECT_DOUBLE_EQ(s.rel_rms, tensor.rel_rms * 1.0 / 0.02);
  EXPECT_TRUE(within(s, 5.8e-5, 0.02 * 5.8e-5, 0));
  // A leak moves it by the tensor's own scale and is far outside.
  EXPECT_FALSE(within(s, 0.38 / 0.02, 0.38, 0));
  // A sequence as large as the tensor's average keeps the tensor's relative threshold.
  const Threshold big = sequence_threshold(DType::kF32, 0.0, 0.0, {2.0, 1.0, 2.0, 1.0}, tensor);
  EXPECT_DOUBLE_EQ(big.rel_rms, tensor.rel_rms);
}

TEST(Tolerance, RuleBaselinesCoverTheFormulationsInRealUse) {
  using reference::Formulation;
  using reference::Rounding;
  const auto f32 = rule_baselines(DType::kF32, MatmulPrecision::kDefault);
  ASSERT_EQ(f32.size(), 3u);
  EXPECT_EQ(f32[0].form, Formulation::kRecurrent);
  EXPECT_EQ(f32[1].form, Formulation::kChunked);
  EXPECT_TRUE(f32[0].fp32 && f32[1].fp32);
  // The independent-prefix cumsum (jnp.cumsum, torch.cumsum on a CPU) is in the default set.
  EXPECT_EQ(f32[2].form, Formulation::kChunked);
  EXPECT_TRUE(f32[2].exact_cumsum);
  const auto bf16 = rule_baselines(DType::kBF16, MatmulPrecision::kDefault);
  ASSERT_EQ(bf16.size(), 3u);
  EXPECT_EQ(bf16[2].operands, Rounding::kBF16);
  EXPECT_EQ(bf16[2].output, Rounding::kBF16);
  const auto tf32 = rule_baselines(DType::kF32, MatmulPrecision::kTF32);
  ASSERT_EQ(tf32.size(), 4u);
  EXPECT_EQ(tf32[2].operands, Rounding::kTF32);
  EXPECT_EQ(tf32[2].stored, Rounding::kNone);
  EXPECT_EQ(matmul_precision_from_name("tf32"), MatmulPrecision::kTF32);
  EXPECT_THROW(matmul_precision_from_name("fp8"), std::invalid_argument);
}

}  // namespace
}  // namespace deltacheck::harness
