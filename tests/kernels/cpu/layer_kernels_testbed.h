// Shared by the CPU layer-kernel tests (test_causal_conv1d_kernel.cc, test_gates_norm_kernels.cc,
// test_recurrent_decode_kernel.cc, test_linear_attention_layer_kernel.cc): deterministic token
// data addressed by (tensor, sequence, position, element), activation buffers that start as NaN,
// state pools with recognizable garbage, and the comparisons. The kernels run against the FP64
// reference on packed inputs with zero-length sequences, pools addressed through slots with
// padding entries, and fp32 / bf16 / fp16 activations: anything a kernel fails to write (or
// writes for a padding entry) shows, and pool rows nobody addresses must stay bit-identical.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace deltacheck::kernels::cpu::layer_testbed {

// ---------------------------------------------------------------------------------------------
// test data

inline uint64_t mix(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The value `x` takes once stored in `t`.
inline double round_to(double x, DType t) {
  const float f = static_cast<float>(x);
  switch (t) {
    case DType::kF32:
      return f;
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(f));
    case DType::kF16:
      return fp16_to_float(float_to_fp16(f));
    default:
      break;
  }
  return f;
}

// Unit roundoff of a storage type: the relative error one rounding to it may add.
inline double roundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 0x1.0p-24;
    case DType::kBF16:
      return 0x1.0p-8;
    case DType::kF16:
      return 0x1.0p-11;
    default:
      break;
  }
  return 0.0;
}

// Half the smallest positive value of a storage type: what a value may lose by rounding to 0.
inline double underflow(DType t) {
  switch (t) {
    case DType::kF32:
      return 0x1.0p-150;
    case DType::kBF16:
      return 0x1.0p-134;
    case DType::kF16:
      return 0x1.0p-25;
    default:
      break;
  }
  return 0.0;
}

// Deterministic data addressed by (tensor, sequence, position, element), so that every layout of
// the same tokens (one packed prefill, a prefix then decode steps) sees the same values. Values
// are rounded to the type the kernel will store them in, so the reference sees exactly those.
class TokenSource {
 public:
  explicit TokenSource(uint64_t seed) : seed_(seed) {}
  double value(uint64_t tensor, int64_t seq, int64_t pos, int64_t elem, double lo,
               double hi) const {
    uint64_t h = mix(seed_ ^ (tensor * 0x9e3779b97f4a7c15ull));
    h = mix(h ^ static_cast<uint64_t>(seq));
    h = mix(h ^ static_cast<uint64_t>(pos));
    h = mix(h ^ static_cast<uint64_t>(elem));
    return lo + (hi - lo) * static_cast<double>(h >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t seed_;
};

struct TokenRef {
  int64_t seq, pos;
};

// [tokens.size(), width] values of one tensor, rounded to `t`.
inline std::vector<double> gather(const TokenSource& src, uint64_t tensor,
                                  const std::vector<TokenRef>& tokens, int64_t width, double lo,
                                  double hi, DType t) {
  std::vector<double> x;
  x.reserve(tokens.size() * static_cast<size_t>(width));
  for (const TokenRef& r : tokens)
    for (int64_t e = 0; e < width; ++e)
      x.push_back(round_to(src.value(tensor, r.seq, r.pos, e, lo, hi), t));
  return x;
}

// Tokens [begin_i, end_i) of every sequence i, packed in sequence order, and their cu_seqlens.
struct Packing {
  std::vector<TokenRef> tokens;
  std::vector<int64_t> cu{0};
};
inline Packing pack(const std::vector<int64_t>& begin, const std::vector<int64_t>& end) {
  Packing p;
  for (size_t i = 0; i < begin.size(); ++i) {
    for (int64_t t = begin[i]; t < end[i]; ++t) p.tokens.push_back({static_cast<int64_t>(i), t});
    p.cu.push_back(static_cast<int64_t>(p.tokens.size()));
  }
  return p;
}

// Parameters that are not per token (weights), fp32 as the kernels take them.
inline std::vector<double> weights(uint64_t seed, int64_t n, double lo, double hi) {
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[i] = static_cast<float>(lo + (hi - lo) * static_cast<double>(mix(seed * 7919 + i) >> 11) *
                                       0x1.0p-53);
  return w;
}

inline std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// An activation buffer in a given storage type.
class Buffer {
 public:
  // Every element NaN, so unwritten elements show.
  static Buffer poisoned(int64_t n, DType t) {
    Buffer b(t);
    if (t == DType::kF32)
      b.f32_.assign(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
    else
      b.f16_.assign(static_cast<size_t>(n), t == DType::kBF16 ? 0x7fc0 : 0x7e00);
    return b;
  }
  static Buffer of(const std::vector<double>& x, DType t) {
    Buffer b = poisoned(static_cast<int64_t>(x.size()), t);
    for (size_t i = 0; i < x.size(); ++i)
      store_from_float(b.data(), t, i, static_cast<float>(x[i]));
    return b;
  }
  void* data() { return f32_.empty() ? static_cast<void*>(f16_.data()) : f32_.data(); }
  const void* data() const {
    return f32_.empty() ? static_cast<const void*>(f16_.data()) : f32_.data();
  }
  double at(int64_t i) const { return load_as_float(data(), type_, i); }
  int64_t size() const { return static_cast<int64_t>(f32_.empty() ? f16_.size() : f32_.size()); }

 private:
  explicit Buffer(DType t) : type_(t) {}
  DType type_;
  std::vector<float> f32_;
  std::vector<uint16_t> f16_;
};

// ---------------------------------------------------------------------------------------------
// comparison

// Every got[i] within atol + rtol * |want[i]| of want[i] (NaN fails).
inline ::testing::AssertionResult close(const char* what, const std::vector<double>& got,
                                        const std::vector<double>& want, double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(got[i] - want[i]);
    const double err = diff == 0.0 ? 0.0 : diff / (atol + rtol * std::abs(want[i]));
    if (!(err <= worst)) worst = err, at = i;  // NaN sticks
    if (std::isnan(err)) break;
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << at << " is " << got[at] << ", want " << want[at] << " (atol "
         << atol << ", rtol " << rtol << ")";
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0.0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

inline std::vector<double> read(const Buffer& b, int64_t begin, int64_t end) {
  std::vector<double> x;
  for (int64_t i = begin; i < end; ++i) x.push_back(b.at(i));
  return x;
}

inline std::vector<double> read(const std::vector<float>& b, int64_t begin, int64_t end) {
  return {b.begin() + begin, b.begin() + end};
}

inline std::vector<double> slice(const std::vector<double>& x, int64_t begin, int64_t end) {
  return {x.begin() + begin, x.begin() + end};
}

inline bool all_nan(const Buffer& b, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    if (!std::isnan(b.at(i))) return false;
  return true;
}

// A pool of fp32 state rows filled with recognizable garbage, and the reference's view of it.
struct Pool {
  int64_t rows, row_size;
  std::vector<float> data;
  Pool(int64_t rows_, int64_t row_size_, uint64_t seed) : rows(rows_), row_size(row_size_) {
    data = to_float(weights(seed, rows * row_size, -1.0, 1.0));
  }
  // Rows of `slots` as [N, row_size] doubles; padding entries get zeros.
  std::vector<double> gather(const std::vector<int32_t>& slots) const {
    std::vector<double> x(slots.size() * static_cast<size_t>(row_size), 0.0);
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i] >= 0)
        for (int64_t e = 0; e < row_size; ++e) x[i * row_size + e] = data[slots[i] * row_size + e];
    return x;
  }
  bool row_equal(const Pool& other, int64_t row) const {
    return std::memcmp(&data[row * row_size], &other.data[row * row_size],
                       static_cast<size_t>(row_size) * sizeof(float)) == 0;
  }
};

// Rows of the pool that no slot addresses must be bit-identical to before.
inline void expect_untouched_rows(const Pool& before, const Pool& after,
                                  const std::vector<int32_t>& slots) {
  for (int64_t r = 0; r < before.rows; ++r)
    if (std::find(slots.begin(), slots.end(), r) == slots.end()) {
      EXPECT_TRUE(before.row_equal(after, r))
          << "pool row " << r << " was not addressed but changed";
    }
}

inline std::string dtype_name(const ::testing::TestParamInfo<DType>& i) {
  return dtype_name(i.param);
}

inline const auto kAllTypes = ::testing::Values(DType::kF32, DType::kBF16, DType::kF16);

enum Tensor : uint64_t { kQkv, kZ, kA, kB, kQ, kK, kV, kG, kBeta };

}  // namespace deltacheck::kernels::cpu::layer_testbed
