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

// Rejects slots at or past num_rows (or, without slots, more sequences than rows) and, where
// states are written, two sequences sharing a slot: they would race on it.
inline Status check_state_slots(const int32_t* slots, int64_t num_seqs, int64_t num_rows,
                                bool writes) {
  if (!slots) {
    if (num_seqs > num_rows)
      return Status::InvalidArgument(std::to_string(num_seqs) + " sequences but only " +
                                     std::to_string(num_rows) + " state rows");
    return Status::Ok();
  }
  std::vector<int32_t> used;
  for (int64_t i = 0; i < num_seqs; ++i) {
    if (slots[i] >= num_rows)
      return Status::InvalidArgument("state slot " + std::to_string(slots[i]) + " of sequence " +
                                     std::to_string(i) + " >= rows " + std::to_string(num_rows));
    if (slots[i] >= 0) used.push_back(slots[i]);
  }
  if (!writes) return Status::Ok();
  std::sort(used.begin(), used.end());
  const auto dup = std::adjacent_find(used.begin(), used.end());
  if (dup != used.end())
    return Status::InvalidArgument("state slot " + std::to_string(*dup) +
                                   " is used by two sequences");
  return Status::Ok();
}

}  // namespace deltacheck::kernels::cpu
