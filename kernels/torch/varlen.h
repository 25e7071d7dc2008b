// Sequence boundaries of a packed (varlen) batch, read once on the host: shared by the LibTorch
// kernels so that every one of them validates cu_seqlens the same way.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
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

// The real entries of a call on a slot-addressed state pool (continuous batching): entries are the
// indices i with state_slots[i] >= 0, rows their slots (both int64, on the slots' device). Padding
// entries (negative slots) are left out. state_slots must be a 1-D int32/int64 tensor of
// num_entries slots, each < num_rows, the non-negative ones distinct (a state is written once).
struct PoolEntries {
  at::Tensor entries, rows;
};
PoolEntries pool_entries(const at::Tensor& state_slots, int64_t num_entries, int64_t num_rows,
                         const char* who);

// Whether autograd should record a kernel: grad mode is on and one of its (defined) inputs requires
// gradients. A kernel that is not recorded runs under at::NoGradGuard (no graph, no saved
// tensors); one that is must build its results without in-place writes or raw-pointer copies, so
// that torch::autograd::grad reaches every input (the LibTorch backward, issue #21). Recording
// changes no value: the forward's bits are the same either way.
bool records_gradients(std::initializer_list<at::Tensor> inputs);

// The optional tensor if it is present and defined, else an undefined tensor.
inline at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

}  // namespace deltacheck::kernels::torch
