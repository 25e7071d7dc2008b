// Host tensors: dtype helpers, element access, guard bands and poison.
#include "cases/tensor.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "cases/fork_guard.h"
#include "core/parallel_for.h"

namespace deltacheck::cases {

DType kernel_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return DType::kF32;
    case DType::kBF16:
      return DType::kBF16;
    case DType::kF16:
      return DType::kF16;
    default:
      throw std::invalid_argument(std::string("not a kernel scalar type: ") + dtype_name(t));
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// Freed large blocks, newest last, and their total size.
struct Recycled {
  std::mutex mu;
  std::vector<std::pair<void*, size_t>> blocks;
  size_t bytes = 0;
};

// Never destroyed: tensors in static storage are freed after every function-local static.
Recycled& recycled() {
  static Recycled* r = new Recycled;
  return *r;
}

}  // namespace

void* storage_allocate(size_t bytes) {
  if (bytes >= kRecycledMinBytes) {
    const NoForkSection no_fork;  // a forked child allocates from the pool too
    Recycled& r = recycled();
    std::lock_guard<std::mutex> lock(r.mu);
    for (size_t i = r.blocks.size(); i-- > 0;)
      if (r.blocks[i].second == bytes) {
        void* p = r.blocks[i].first;
        r.blocks.erase(r.blocks.begin() + static_cast<std::ptrdiff_t>(i));
        r.bytes -= bytes;
        return p;
      }
  }
  return ::operator new(bytes);
}

void storage_free(void* p, size_t bytes) noexcept {
  if (bytes >= kRecycledMinBytes && bytes <= kRecycledBytes) {
    const NoForkSection no_fork;
    Recycled& r = recycled();
    std::lock_guard<std::mutex> lock(r.mu);
    // Oldest blocks go first when the newest would not fit.
    while (!r.blocks.empty() && r.bytes + bytes > kRecycledBytes) {
      ::operator delete(r.blocks.front().first);
      r.bytes -= r.blocks.front().second;
      r.blocks.erase(r.blocks.begin());
    }
    r.blocks.emplace_back(p, bytes);
    r.bytes += bytes;
    return;
  }
  ::operator delete(p);
}

Tensor::Tensor(std::string name, DType dtype, std::vector<int64_t> shape, size_t guard_bytes,
               Init init)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)), guard_(guard_bytes) {
  numel_ = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw std::invalid_argument("negative dimension in tensor '" + name_ + "'");
    numel_ *= d;
  }
  // One spare byte keeps data() non-null for empty tensors (a zero-length sequence).
  storage_.resize(nbytes() + 2 * guard_ + 1);
  if (init == Init::kZero)
    std::memset(storage_.data(), 0, storage_.size());
  else
    storage_.back() = 0;  // the spare byte: every byte outside the body and guards is defined
}

double Tensor::get(int64_t i) const {
  const void* p = data();
  switch (dtype_) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF64:
      return static_cast<const double*>(p)[i];
    case DType::kI32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0.0;
}

void Tensor::set(int64_t i, double x) {
  void* p = data();
  switch (dtype_) {
    case DType::kF32:
      static_cast<float*>(p)[i] = static_cast<float>(x);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(x));
      break;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = float_to_fp16(static_cast<float>(x));
      break;
    case DType::kF64:
      static_cast<double*>(p)[i] = x;
      break;
    case DType::kI32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x);
      break;
    case DType::kI64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(x);
      break;
    case DType::kU8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(x);
      break;
  }
}

std::vector<double> Tensor::to_double() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  // The type switch once per tensor, not per element: this runs on every output of every case.
  auto convert = [&](auto element) {
    for (int64_t i = 0; i < numel_; ++i) out[i] = element(i);
  };
  const void* p = data();
  switch (dtype_) {
    case DType::kF32:
      convert([&](int64_t i) { return static_cast<double>(static_cast<const float*>(p)[i]); });
      break;
    case DType::kF64:
      convert([&](int64_t i) { return static_cast<const double*>(p)[i]; });
      break;
    default:
      convert([&](int64_t i) { return get(i); });
      break;
  }
  return out;
}

void Tensor::fill_guards(uint8_t pattern) {
  std::memset(storage_.data(), pattern, guard_);
  std::memset(storage_.data() + guard_ + nbytes(), pattern, guard_);
}

bool Tensor::guards_intact(uint8_t pattern) const {
  for (size_t i = 0; i < guard_; ++i)
    if (storage_[i] != pattern || storage_[guard_ + nbytes() + i] != pattern) return false;
  return true;
}

namespace {
// Poison patterns: quiet NaNs with a payload no arithmetic produces, so "still poison" means
// "never written" while a computed NaN is a numeric failure.
constexpr uint32_t kPoisonF32 = 0x7fc5a5a5u;
constexpr uint16_t kPoisonBF16 = 0x7fa5u;
constexpr uint16_t kPoisonF16 = 0x7ea5u;
constexpr uint64_t kPoisonF64 = 0x7ff8a5a5a5a5a5a5ull;
}  // namespace

namespace {
// Element i of n elements of sizeof(U) bytes at p, as raw bits.
template <typename U>
U bits_at(const uint8_t* p, int64_t i) {
  U x;
  std::memcpy(&x, p + i * static_cast<int64_t>(sizeof(U)), sizeof(U));
  return x;
}

template <typename U>
void fill_bits_serial(uint8_t* p, int64_t n, U bits) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(p + i * static_cast<int64_t>(sizeof(U)), &bits, sizeof(U));
}

// Filling is memory-bound: outputs of 1 MiB and more are filled by every hardware thread (the
// harness poisons every output of every case, docs/performance.md; the threads are kept waiting,
// see core/parallel_for.h).
template <typename U>
void fill_bits(uint8_t* p, int64_t n, U bits) {
  constexpr int64_t kParallelBytes = int64_t{1} << 20;
  if (n * static_cast<int64_t>(sizeof(U)) < kParallelBytes) return fill_bits_serial(p, n, bits);
  const int64_t parts = core::resolve_threads(0);
  const int64_t per = (n + parts - 1) / parts;
  core::parallel_for(parts, parts, [&](int64_t t) {
    const int64_t begin = std::min(n, t * per);
    fill_bits_serial(p + begin * static_cast<int64_t>(sizeof(U)), std::min(per, n - begin), bits);
  });
}

// Elements equal to `bits`, and the first of them: a branch-free count first (it vectorizes),
// the search only when something is still poisoned.
template <typename U>
int64_t count_bits(const uint8_t* p, int64_t n, U bits, int64_t* first) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += bits_at<U>(p, i) == bits;
  if (first) {
    *first = -1;
    for (int64_t i = 0; count > 0 && i < n; ++i)
      if (bits_at<U>(p, i) == bits) {
        *first = i;
        break;
      }
  }
  return count;
}
}  // namespace

namespace {
void poison_pattern(DType t, uint8_t* pattern) {
  switch (t) {
    case DType::kF32:
      std::memcpy(pattern, &kPoisonF32, 4);
      break;
    case DType::kBF16:
      std::memcpy(pattern, &kPoisonBF16, 2);
      break;
    case DType::kF16:
      std::memcpy(pattern, &kPoisonF16, 2);
      break;
    case DType::kF64:
      std::memcpy(pattern, &kPoisonF64, 8);
      break;
    default:
      std::memset(pattern, 0xA5, 8);
      break;
  }
}

// fn(poison) with the poison of a dtype as one unsigned integer of the element's size.
template <typename Fn>
auto with_poison_bits(DType t, Fn&& fn) {
  uint8_t pattern[8];
  poison_pattern(t, pattern);
  switch (dtype_size(t)) {
    case 1:
      return fn(pattern[0]);
    case 2:
      return fn(bits_at<uint16_t>(pattern, 0));
    case 4:
      return fn(bits_at<uint32_t>(pattern, 0));
    default:
      return fn(bits_at<uint64_t>(pattern, 0));
  }
}
}  // namespace

void Tensor::poison() {
  uint8_t* p = static_cast<uint8_t*>(data());
  with_poison_bits(dtype_, [&](auto bits) { fill_bits(p, numel_, bits); });
}

bool Tensor::is_poisoned(int64_t i) const {
  uint8_t pattern[8];
  poison_pattern(dtype_, pattern);
  const int es = dtype_size(dtype_);
  return std::memcmp(static_cast<const uint8_t*>(data()) + i * es, pattern, es) == 0;
}

int64_t Tensor::count_poisoned(int64_t* first) const {
  const uint8_t* p = static_cast<const uint8_t*>(data());
  return with_poison_bits(dtype_, [&](auto bits) { return count_bits(p, numel_, bits, first); });
}

Tensor& TensorMap::add(Tensor t) {
  if (has(t.name())) throw std::invalid_argument("duplicate tensor '" + t.name() + "'");
  tensors_.push_back(std::move(t));
  return tensors_.back();
}

const Tensor* TensorMap::find(const std::string& name) const {
  for (const Tensor& t : tensors_)
    if (t.name() == name) return &t;
  return nullptr;
}

Tensor* TensorMap::find(const std::string& name) {
  for (Tensor& t : tensors_)
    if (t.name() == name) return &t;
  return nullptr;
}

const Tensor& TensorMap::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (!t) throw std::out_of_range("missing tensor '" + name + "'");
  return *t;
}

Tensor& TensorMap::at(const std::string& name) {
  Tensor* t = find(name);
  if (!t) throw std::out_of_range("missing tensor '" + name + "'");
  return *t;
}

}  // namespace deltacheck::cases
