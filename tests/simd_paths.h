// A fixture parameterized on the code path of core/simd.h: false runs the AVX2 clones where the
// CPU has them, true forces the baseline x86-64 path (and asserts that it is the one that runs).
// Tests that pin bits instantiate it with both values.
#pragma once

#include <gtest/gtest.h>

#include "core/simd.h"

namespace deltacheck::test_support {

class OnSimdPath : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    core::set_simd_portable(GetParam());
    if (GetParam()) {
      ASSERT_FALSE(core::use_avx2());  // the portable path is the one that runs
    }
  }
  void TearDown() override { core::set_simd_portable(false); }
};

}  // namespace deltacheck::test_support
