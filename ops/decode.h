// Helpers for decoding a case's parameters into an operation's typed struct (ops/<op>/params.h):
// each string parameter is read here once, not at every use.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "cases/case.h"
#include "cases/tensor.h"

namespace deltacheck::ops {

// The throws below are precondition violations, not input validation: a case exists only once its
// parameters have passed its schema (choices, ranges, the op's check, as values: cases/case.h), so
// an unknown choice or a case of another op here is a programming error.

// The enum value whose name is the case's `key` parameter: names[i] names E(i).
template <typename E, size_t N>
E decode_choice(const cases::Case& c, const char* key, const std::array<const char*, N>& names) {
  const std::string& v = c.get(key);
  for (size_t i = 0; i < N; ++i)
    if (v == names[i]) return static_cast<E>(i);
  throw std::invalid_argument(c.op() + ": unknown " + key + " '" + v + "'");
}

// The case's activation dtype parameter (`dtype`: fp32 | bf16 | fp16).
cases::DType decode_dtype(const cases::Case& c, const char* key = "dtype");

// Throws std::invalid_argument unless c names operation `op`.
void expect_op(const cases::Case& c, const char* op);

// The value of a call that cannot fail for a case that passed its schema's check (the check made
// the same call and refused the case otherwise); throws std::logic_error naming the status if it
// does fail: a programming error.
template <typename T>
T checked(StatusOr<T> v) {
  if (!v.ok())
    throw std::logic_error("a checked case failed its own check: " + v.status().message());
  return v.take();
}

}  // namespace deltacheck::ops
