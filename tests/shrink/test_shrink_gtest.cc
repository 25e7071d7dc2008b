// The GoogleTest helper's route: with DELTACHECK_SHRINK set, a failing case's message ends with
// the smallest case that fails the same way; without it, the message is the verdict line alone.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "deltacheck/gtest.h"

namespace deltacheck {
namespace {

std::unique_ptr<Backend>& wrong() {
  static std::unique_ptr<Backend> b = make_backend("wrong:ignore-cu-seqlens");
  return b;
}

const Case& leaky_case() {
  static const Case c = parse_case("gdr(layout=packed[1*40,2*30,3*20],HV=8,seed=3)");
  return c;
}

TEST(ShrinkGtest, TheFailureMessageEndsWithTheSmallestCase) {
  ::setenv("DELTACHECK_SHRINK", "1", 1);
  EXPECT_FATAL_FAILURE(gtest::check_case(leaky_case(), *wrong()),
                       "shrunk: gdr(layout=packed[1,1],H=1,HV=1,K=1,V=1,seed=3) (2 seqs, 2 tokens");
  ::unsetenv("DELTACHECK_SHRINK");
}

TEST(ShrinkGtest, WithoutTheVariableNothingIsShrunk) {
  ::unsetenv("DELTACHECK_SHRINK");
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    gtest::check_case(leaky_case(), *wrong());
  }
  ASSERT_EQ(failures.size(), 1);
  const std::string message = failures.GetTestPartResult(0).message();
  EXPECT_NE(message.find("LEAK"), std::string::npos) << message;
  EXPECT_EQ(message.find("shrunk:"), std::string::npos) << message;
}

}  // namespace
}  // namespace deltacheck
