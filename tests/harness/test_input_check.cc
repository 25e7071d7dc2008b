// The check that a backend left its inputs unchanged (harness/input_check.h): the first changed
// element of the first changed input is named.
#include <gtest/gtest.h>

#include <string>

#include "harness/input_check.h"

namespace deltacheck::harness {
namespace {

cases::TensorMap inputs(int64_t big) {
  cases::TensorMap m;
  cases::Tensor& cu = m.add(cases::Tensor("cu_seqlens", cases::DType::kI64, {4}));
  for (int64_t i = 0; i < 4; ++i) cu.set(i, static_cast<double>(i * 10));
  cases::Tensor& q = m.add(cases::Tensor("q", cases::DType::kF32, {big}));
  for (int64_t i = 0; i < big; ++i) q.set(i, 0.001 * static_cast<double>(i % 1000));
  cases::Tensor& g = m.add(cases::Tensor("g", cases::DType::kBF16, {1000}));
  for (int64_t i = 0; i < 1000; ++i) g.set(i, -0.5);
  return m;
}

TEST(InputCheck, NamesTheFirstChangedElement) {
  for (const int64_t big : {int64_t{300000}, int64_t{1000}}) {
    SCOPED_TRACE(big);
    cases::TensorMap m = inputs(big);
    const InputCopy copy(m);
    EXPECT_EQ(copy.changed(m), "");
    cases::Tensor& q = m.at("q");
    q.set(big - 1, 7.0);  // the last piece
    q.set(big / 2 + 1, 7.0);
    EXPECT_EQ(copy.changed(m), "wrote into its input 'q' (element " + std::to_string(big / 2 + 1) +
                                   " of " + std::to_string(big) +
                                   " changed; inputs are read-only)");
    m.at("cu_seqlens").set(3, 31.0);  // an earlier tensor is named first
    EXPECT_EQ(copy.changed(m),
              "wrote into its input 'cu_seqlens' (element 3 of 4 changed; inputs are read-only)");
    cases::TensorMap again = inputs(big);
    again.at("g").set(999, 0.25);
    EXPECT_EQ(copy.changed(again),
              "wrote into its input 'g' (element 999 of 1000 changed; inputs are read-only)");
  }
}

TEST(InputCheck, AnotherShapeOrCountOfInputsIsAChange) {
  const InputCopy copy(inputs(1000));
  EXPECT_EQ(copy.changed(inputs(999)), "changed the size of its input 'q'");
  cases::TensorMap fewer;
  fewer.add(cases::Tensor("q", cases::DType::kF32, {1000}));
  EXPECT_EQ(copy.changed(fewer), "changed the number of its inputs");
}

}  // namespace
}  // namespace deltacheck::harness
