// Sequence boundaries of a packed (varlen) batch, read once on the host: shared by the LibTorch
// kernels so that every one of them validates cu_seqlens the same way.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltacheck::kernels::torch {

// Shape as "[1, 2, 3]", for error messages.
std::string shape_string(const at::Tensor& t);

// Throws std::invalid_argument("<who>: <what>").
[[noreturn]] void fail(const char* who, const std::string& what);

// The boundaries [N + 1] of the sequences in a packed batch of `total` tokens. cu_seqlens must be
// a 1-D int32/int64 tensor starting at 0, non-decreasing and ending at `total`. When it is absent,
// the batch is `batch` sequences of `total / batch` tokens each.
std::vector<int64_t> sequence_bounds(const std::optional<at::Tensor>& cu_seqlens, int64_t batch,
                                     int64_t total, const char* who);

// The optional tensor if it is present and defined, else an undefined tensor.
inline at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

}  // namespace deltacheck::kernels::torch
