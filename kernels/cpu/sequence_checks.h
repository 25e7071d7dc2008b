// Checks of how a call lays out its sequences, shared by the CPU kernels: packed boundaries
// (cu_seqlens) and per-sequence state slots into a pool (continuous batching; negative slots are
// padding entries).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/common/serving_rows.h"

namespace deltacheck::kernels::cpu {

// The CPU kernels compute in fp32 / bf16 / fp16 storage only.
inline Status check_dtype(DType t, const char* what) {
  if (is_kernel_dtype(t)) return Status::Ok();
  return Status::Unsupported(std::string(what) + " dtype " + dtype_name(t) +
                             " (supported: fp32, bf16, fp16)");
}

// cu_seqlens[0..num_seqs] must start at 0, never decrease and end at seq_len.
inline Status check_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, int64_t seq_len) {
  if (num_seqs < 0) return Status::InvalidArgument("num_seqs must be >= 0");
  if (cu_seqlens[0] != 0) return Status::InvalidArgument("cu_seqlens[0] must be 0");
  if (cu_seqlens[num_seqs] != seq_len) return Status::InvalidArgument("cu_seqlens must end at T");
  for (int64_t i = 0; i < num_seqs; ++i)
    if (cu_seqlens[i + 1] < cu_seqlens[i])
      return Status::InvalidArgument("cu_seqlens decreases at " + std::to_string(i + 1));
  return Status::Ok();
}

// Pool slots of a call (kernels/common/serving_rows.h): rows in range, no two writers of a row.
using kernels::check_state_slots;

}  // namespace deltacheck::kernels::cpu
