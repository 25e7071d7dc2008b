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

}  // namespace deltacheck::ops
