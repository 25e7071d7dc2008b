// Checks of the row tables the serving decode contracts take (docs/serving.md), on host arrays:
// shared by the CPU decode kernel and the CUDA one (which copies the tables to the host first).
//   accept  state_indices [N, T] (row of each token's state: the start row is column
//           num_accepted_tokens[i] - 1, every token's state goes to its column's row; negative
//           rows are not written, a negative start row marks a padding entry), num_accepted_tokens
//           [N] in 1..T (nullptr: every count is 1)
//   tree    parents [N, T] in -1..t-1 (-1: the start state, row state_slots[i], only read) and
//           state_indices [N, T] >= 0 (each token's own row) for every non-padding sequence
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace deltacheck::kernels {

// Rejects slots at or past num_rows (or, without slots, more sequences than rows) and, where
// states are written, two entries sharing a slot: they would race on it.
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

// The accept or tree tables of n sequences of T tokens each against a pool of `rows` rows.
inline Status check_serving_rows(const int32_t* state_indices, const int32_t* num_accepted_tokens,
                                 const int32_t* parents, const int32_t* state_slots, int64_t n,
                                 int64_t T, int64_t rows) {
  if (Status st = check_state_slots(state_indices, n * T, rows, true); !st.ok()) return st;
  if (parents) {
    if (!state_slots) return Status::InvalidArgument("parents need state_slots (start rows)");
    if (Status st = check_state_slots(state_slots, n, rows, false); !st.ok()) return st;
    for (int64_t i = 0; i < n * T; ++i) {
      const int64_t t = i % T;
      if (parents[i] < -1 || parents[i] >= t)
        return Status::InvalidArgument("parents[" + std::to_string(i / T) + ", " +
                                       std::to_string(t) + "] = " + std::to_string(parents[i]) +
                                       " outside -1.." + std::to_string(t - 1) +
                                       " (parents come before their children)");
      if (state_indices[i] < 0 && state_slots[i / T] >= 0)
        return Status::InvalidArgument("state_indices[" + std::to_string(i / T) + ", " +
                                       std::to_string(t) + "] < 0: a tree token needs its row");
    }
    return Status::Ok();
  }
  for (int64_t i = 0; num_accepted_tokens && i < n; ++i)
    if (num_accepted_tokens[i] < 1 || num_accepted_tokens[i] > T)
      return Status::InvalidArgument("num_accepted_tokens[" + std::to_string(i) +
                                     "] = " + std::to_string(num_accepted_tokens[i]) +
                                     " outside 1.." + std::to_string(T));
  return Status::Ok();
}

}  // namespace deltacheck::kernels
