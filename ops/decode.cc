// Shared decoding of case parameters (ops/decode.h).
#include "ops/decode.h"

namespace deltacheck::ops {

cases::DType decode_dtype(const cases::Case& c, const char* key) {
  const std::string& s = c.get(key);
  if (s == "bf16") return cases::DType::kBF16;
  if (s == "fp16") return cases::DType::kF16;
  if (s == "fp32") return cases::DType::kF32;
  throw std::invalid_argument(c.op() + ": unknown " + key + " '" + s + "'");
}

void expect_op(const cases::Case& c, const char* op) {
  if (c.op() != op)
    throw std::invalid_argument(std::string("a ") + op + " parameter read from " + c.id());
}

}  // namespace deltacheck::ops
