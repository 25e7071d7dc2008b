// Host tensors that carry case inputs and backend outputs: a dtype, a shape and bytes. Outputs are
// allocated with guard bands on both sides so the runner can see writes outside the tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"

namespace deltacheck::cases {

using deltacheck::DType;  // core/dtype.h
using deltacheck::dtype_name;
using deltacheck::dtype_size;
using deltacheck::is_floating;
// t itself when the kernels compute in it (kF32 / kBF16 / kF16); throws std::invalid_argument.
DType kernel_dtype(DType t);

std::string shape_string(const std::vector<int64_t>& shape);

// Tensor storage. Large blocks (outputs of long cases) are recycled: a block freed by one case
// is handed to the next case asking for exactly as many bytes, its pages already mapped, so a
// 32 MiB output costs a fill instead of 8192 page faults (harness overhead, docs/performance.md).
// At most kRecycledBytes are kept; elements are left uninitialized by resize() (Tensor's
// constructor fills them).
void* storage_allocate(size_t bytes);
void storage_free(void* p, size_t bytes) noexcept;
constexpr size_t kRecycledMinBytes = size_t{1} << 20;
constexpr size_t kRecycledBytes = size_t{256} << 20;

template <typename T>
struct StorageAllocator {
  using value_type = T;
  StorageAllocator() = default;
  template <typename U>
  StorageAllocator(const StorageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(storage_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { storage_free(p, n * sizeof(T)); }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialized: no zero fill
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <typename U>
  bool operator==(const StorageAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const StorageAllocator<U>&) const noexcept {
    return false;
  }
};
using Storage = std::vector<uint8_t, StorageAllocator<uint8_t>>;

class Tensor {
 public:
  // How a new tensor's elements start: zeros, or unspecified bytes for a tensor that is filled
  // at once (outputs: poison()).
  enum class Init { kZero, kUnspecified };

  Tensor() = default;
  Tensor(std::string name, DType dtype, std::vector<int64_t> shape, size_t guard_bytes = 0,
         Init init = Init::kZero);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  size_t guard_bytes() const { return guard_; }

  void* data() { return storage_.data() + guard_; }
  const void* data() const { return storage_.data() + guard_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data());
  }

  // Element i as double (exact for every dtype here) / stored from double (rounded to dtype).
  double get(int64_t i) const;
  void set(int64_t i, double x);
  std::vector<double> to_double() const;

  // Guard bands and poison: fill guards with a byte pattern and the body with NaN (floating) or
  // 0xA5 bytes (integers); guards_intact() tells whether anything wrote outside the body.
  void fill_guards(uint8_t pattern);
  bool guards_intact(uint8_t pattern) const;
  void poison();
  // Elements still holding the poison bit pattern (never written), and the first such index.
  int64_t count_poisoned(int64_t* first = nullptr) const;
  bool is_poisoned(int64_t i) const;

  // Raw storage including guards, for comparisons of whole buffers.
  const Storage& storage() const { return storage_; }

 private:
  std::string name_;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  size_t guard_ = 0;
  Storage storage_;
};

// An ordered set of named tensors.
class TensorMap {
 public:
  Tensor& add(Tensor t);
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const Tensor* find(const std::string& name) const;
  Tensor* find(const std::string& name);
  const Tensor& at(const std::string& name) const;  // throws std::out_of_range naming the tensor
  Tensor& at(const std::string& name);
  // References stay valid as tensors are added (a deque never moves its elements).
  const std::deque<Tensor>& all() const { return tensors_; }
  std::deque<Tensor>& all() { return tensors_; }

 private:
  std::deque<Tensor> tensors_;
};

}  // namespace deltacheck::cases
