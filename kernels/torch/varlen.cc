// Host-side validation and reading of cu_seqlens for the LibTorch kernels.
#include "kernels/torch/varlen.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace deltacheck::kernels::torch {

std::string shape_string(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(t.size(i));
  }
  return s + "]";
}

void fail(const char* who, const std::string& what) {
  throw std::invalid_argument(std::string(who) + ": " + what);
}

bool records_gradients(std::initializer_list<at::Tensor> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<int64_t> sequence_bounds(const std::optional<at::Tensor>& cu_seqlens, int64_t batch,
                                     int64_t total, const char* who) {
  at::Tensor cu = value_or_undefined(cu_seqlens);
  std::vector<int64_t> bounds;
  if (!cu.defined()) {
    if (batch <= 0 || total % batch != 0) fail(who, "batch does not divide the token count");
    for (int64_t b = 0; b <= batch; ++b) bounds.push_back(b * (total / batch));
    return bounds;
  }
  if (cu.scalar_type() != at::kInt && cu.scalar_type() != at::kLong) {
    fail(who, "cu_seqlens must be int32 or int64");
  }
  if (cu.dim() != 1 || cu.size(0) < 1) {
    fail(who, "cu_seqlens must have shape [N + 1], got " + shape_string(cu));
  }
  at::Tensor host = cu.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = host.data_ptr<int64_t>();
  bounds.assign(p, p + host.numel());
  if (bounds.front() != 0) fail(who, "cu_seqlens must start at 0");
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] < bounds[i - 1]) {
      fail(who, "cu_seqlens decreases at index " + std::to_string(i));
    }
  }
  if (bounds.back() != total) {
    fail(who, "cu_seqlens ends at " + std::to_string(bounds.back()) + " but there are " +
                  std::to_string(total) + " tokens");
  }
  return bounds;
}

PoolEntries pool_entries(const at::Tensor& state_slots, int64_t num_entries, int64_t num_rows,
                         const char* who) {
  if (!state_slots.defined() || state_slots.dim() != 1 || state_slots.size(0) != num_entries ||
      (state_slots.scalar_type() != at::kInt && state_slots.scalar_type() != at::kLong)) {
    fail(who, "state_slots must be int32/int64 [" + std::to_string(num_entries) + "]");
  }
  const at::Tensor host = state_slots.to(at::kCPU, at::kLong).contiguous();
  const int64_t* s = host.data_ptr<int64_t>();
  std::vector<int64_t> entries, rows;
  for (int64_t i = 0; i < num_entries; ++i) {
    if (s[i] >= num_rows) {
      fail(who, "state slot " + std::to_string(s[i]) + " of entry " + std::to_string(i) +
                    " >= rows " + std::to_string(num_rows));
    }
    if (s[i] < 0) continue;  // padding entry
    entries.push_back(i);
    rows.push_back(s[i]);
  }
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) fail(who, "state slot " + std::to_string(*dup) + " is used twice");
  auto to_device = [&](const std::vector<int64_t>& v) {
    at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
    std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
    return t.to(state_slots.device());
  };
  return {to_device(entries), to_device(rows)};
}

}  // namespace deltacheck::kernels::torch
