// Where serving cases put their states: the pool rows of gdr's and the layer's serving modes
// (ops/gdr/serving.h, ops/layer/serving.h) and the accepted counts of their speculative verifies,
// drawn from the case's seed the same way for every operation (docs/serving.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "cases/rng.h"
#include "cases/tensor.h"
#include "ops/operation.h"
#include "ops/repack.h"

namespace deltacheck::ops {

// Fisher-Yates over [0, n) with the stream's uniforms from counter `at` on.
std::vector<int64_t> shuffled(int64_t n, const cases::Stream& st, uint64_t at);

// A pool shared by sequences that each own `count[q]` rows: row 0 unused, then the sequences'
// ranges in shuffled order, shuffled inside, an unused row after every other range. rows_of[q][b]
// is sequence q's b-th row; first[q] the start of its range.
struct PoolRows {
  int64_t rows = 0;
  std::vector<int64_t> first, count;
  std::vector<std::vector<int64_t>> rows_of;
};
PoolRows pool_rows(const std::vector<int64_t>& count, uint64_t seed);

// A pool of `rows` rows addressed by one slot per sequence (continuous batching): n distinct rows
// in shuffled order, the last `padding` sequences padding entries (slot -1); rows nobody
// addresses must come back bit-identical.
std::vector<int32_t> slot_table(int64_t n, int64_t padding, int64_t rows, uint64_t seed);

// num_accepted_tokens of a speculative verify of n sequences of t tokens: a seeded rotation of
// 1..t, so every count is present when n >= t.
std::vector<int32_t> accepted_counts(int64_t n, int64_t t, uint64_t seed);

// An evaluation of a prefill case (the FP64 oracle or a tolerance baseline).
using Evaluate = std::function<Values(const cases::Case&, const cases::TensorMap&)>;

// A state each piece of a repacked evaluation starts from: the tensor's name, its shape past the
// piece dimension, and one row of values per piece (handed over in `dtype`).
struct PieceState {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<std::vector<double>> rows;
  cases::DType dtype = cases::DType::kF32;
};

// Runs `pieces` of the case's sequences as one prefill (the repacked case with `overrides`),
// piece i starting from rows[i] of every state.
Values run_pieces(const cases::Case& c, const cases::TensorMap& tokens,
                  const std::vector<Piece>& pieces, const std::vector<PieceState>& states,
                  const std::vector<std::pair<std::string, std::string>>& overrides,
                  const Evaluate& eval);

// Copies the token rows (`row` values each) of the pieces `keep` selects from a repacked output
// into the case's output `dst`.
void scatter_pieces(const cases::Layout& layout, const std::vector<Piece>& pieces, int64_t row,
                    const std::vector<double>& from, std::vector<double>& dst,
                    const std::function<bool(const Piece&)>& keep);

}  // namespace deltacheck::ops
