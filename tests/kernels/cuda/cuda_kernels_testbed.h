// Shared by the CUDA kernel tests (test_cuda_gated_delta_rule.cc, test_cuda_causal_conv1d.cc,
// test_cuda_masks.cc): the device check every test that touches the device starts with (it skips,
// with the reason, when there is none), device buffers, the seeded generator, values in a storage
// dtype, and the distance of a result from the FP64 oracle.
//
// Inputs are drawn in fp32, rounded to the kernel's dtype, and the reference sees exactly the
// rounded values, so the only differences left are the kernels' own arithmetic and output
// rounding. Outputs are poisoned (all bits set: NaN in fp32, bf16 and fp16) before each run, so an
// unwritten element fails, and elements the kernel must not touch are compared bit for bit.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/device.h"

namespace deltacheck::kernels::cuda::testbed {

#define DC_REQUIRE_DEVICE()                                                              \
  do {                                                                                   \
    const Status device_status = cuda_device_available();                                \
    if (!device_status.ok()) GTEST_SKIP() << "unsupported: " << device_status.message(); \
  } while (0)

#define DC_EXPECT_OK(expr)                                           \
  do {                                                               \
    const Status status_ = (expr);                                   \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.message(); \
  } while (0)

inline constexpr uint8_t kPoison = 0xff;

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(cuda_status(err, what).message());
}

// splitmix64: a fixed, tiny generator, so every run draws the same inputs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), from 24 random bits.
  float uniform(double lo, double hi) {
    return static_cast<float>(lo + (hi - lo) * static_cast<double>(next() >> 40) * 0x1.0p-24);
  }
  std::vector<float> uniform_vector(size_t n, double lo, double hi) {
    std::vector<float> x(n);
    for (float& e : x) e = uniform(lo, hi);
    return x;
  }

 private:
  uint64_t state_;
};

// Device memory owned by a test; every CUDA error throws, which fails the test with its message.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_), "cudaMalloc");
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    check_cuda(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(ptr_); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void fill(uint8_t byte) { check_cuda(cudaMemset(ptr_, byte, bytes_), "cudaMemset"); }
  template <typename T>
  std::vector<T> download() const {
    check_cuda(cudaDeviceSynchronize(), "kernel execution");
    std::vector<T> host(bytes_ / sizeof(T));
    check_cuda(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy D2H");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- values in a storage dtype ---------------------------------------------------------------

inline std::vector<uint8_t> encode(const std::vector<float>& x, DType t) {
  std::vector<uint8_t> bytes(x.size() * static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < x.size(); ++i)
    store_from_float(bytes.data(), t, static_cast<int64_t>(i), x[i]);
  return bytes;
}

inline std::vector<float> decode(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> x(bytes.size() / static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = load_as_float(bytes.data(), t, static_cast<int64_t>(i));
  return x;
}

inline std::vector<float> rounded(const std::vector<float>& x, DType t) {
  return decode(encode(x, t), t);
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

inline std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3e", x);
  return buf;
}

inline bool all_bytes(const std::vector<uint8_t>& bytes, size_t begin, size_t end, uint8_t value) {
  for (size_t i = begin; i < end; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// Distance of a kernel result from the FP64 oracle over selected elements.
struct Error {
  double max_abs = 0.0;
  double ref_sq = 0.0;
  double diff_sq = 0.0;
  int64_t count = 0;
  int64_t non_finite = 0;
  double ref_norm() const { return std::sqrt(ref_sq); }
  double rel_rms() const { return ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq); }
  void add(double ref, double got) {
    ++count;
    if (!std::isfinite(got)) {
      ++non_finite;
      return;
    }
    const double d = got - ref;
    max_abs = std::max(max_abs, std::abs(d));
    diff_sq += d * d;
    ref_sq += ref * ref;
  }
};

inline std::string describe(const char* what, const Error& e) {
  return std::string(what) + ": rel_rms " + sci(e.rel_rms()) + ", max_abs " + sci(e.max_abs) +
         ", non-finite " + std::to_string(e.non_finite) + " of " + std::to_string(e.count);
}

// Relative RMS ceilings of one kernel output against the oracle, per dtype of o (docs/tolerance.md:
// about 5e-3 for bf16 / fp16; fp32 far tighter).
inline double output_ceiling(DType t) {
  switch (t) {
    case DType::kF32:
      return 5e-6;
    case DType::kBF16:
      return 5e-3;
    case DType::kF16:
      return 1e-3;
    default:
      break;
  }
  return 0.0;
}

}  // namespace deltacheck::kernels::cuda::testbed
