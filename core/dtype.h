// The element types of tensors, one enum for every layer: the case generator, the kernels (which
// compute in kF32 / kBF16 / kF16 storage), the harness and the public API.
#pragma once

namespace deltacheck {

enum class DType { kF32, kBF16, kF16, kF64, kI32, kI64, kU8 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kF64:
      return "fp64";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
  }
  return "?";
}

inline int dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

inline bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF64;
}

// The storage types the kernels compute in.
inline bool is_kernel_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

}  // namespace deltacheck
