// Whole-row conversions between the activation storage types and fp32 for the CPU kernels: the
// type switch is taken once per row, so the element loops are plain and vectorize.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace deltacheck::kernels::cpu {

// dst[i] = element offset + i of src (stored as t) in fp32, for i < n.
inline void load_row(const void* src, DType t, int64_t offset, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      return;
    }
    default:  // not a storage type of the kernels: they reject it up front
      return;
  }
}

// Element offset + i of dst (stored as t) = src[i] rounded to nearest even, for i < n.
inline void store_row(void* dst, DType t, int64_t offset, int64_t n, const float* src) {
  switch (t) {
    case DType::kF32: {
      float* d = static_cast<float*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
    default:  // not a storage type of the kernels: they reject it up front
      return;
  }
}

}  // namespace deltacheck::kernels::cpu
