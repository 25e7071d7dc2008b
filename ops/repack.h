// Repacking a case's sequences: run some of them alone, in another order, or split into pieces,
// by moving token rows and sequence rows of the tensors. The operation says which tensors are
// token-major ([B, T, ...] or [T, ...]) and which sequence-major ([N, ...]); everything else is
// copied as it is. This is what the oracle-free leakage probes and the leak confirmation rest on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "ops/operation.h"

namespace deltacheck::ops {

// Tokens [offset, offset + length) of sequence `seq`, as one sequence of the repacked case.
struct Piece {
  int64_t seq;
  int64_t offset;
  int64_t length;
};

struct Repacked {
  cases::Case c;
  cases::TensorMap tensors;
};

// Token rows of the case's token-major tensors: its sequences' tokens plus the operation's
// padding tail (Operation::tail_rows).
int64_t token_rows(const cases::Case& c);

// The case made of `pieces` (single[...] for one piece, packed[...] otherwise), with its inputs.
// Sequence-major inputs follow each piece's source sequence; cu_seqlens is rebuilt. A padding
// tail is left out (the new case has `tail=0`): pieces are tokens of sequences.
// `overrides` change other parameters of the new case at the same time (e.g. its cache mode).
Repacked repack(const cases::Case& c, const cases::TensorMap& inputs,
                const std::vector<Piece>& pieces,
                const std::vector<std::pair<std::string, std::string>>& overrides = {});

// Bytes inside a tensor, not copied: valid while the tensor lives.
class ByteRange {
 public:
  ByteRange() = default;
  ByteRange(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Token rows [first, first + count) (token-major) or sequence row `first` (sequence-major, count
// rows) of a tensor, as raw bytes (a range inside the tensor).
ByteRange row_bytes(const cases::Tensor& t, TensorMajor major, int64_t total_rows, int64_t first,
                    int64_t count);
// The same for values (flat doubles of a tensor with `total_rows` rows).
std::vector<double> row_values(const std::vector<double>& v, int64_t total_rows, int64_t first,
                               int64_t count);

// Row index of token `offset` of sequence `seq` in a layout's flat token order.
int64_t token_row(const cases::Layout& layout, int64_t seq, int64_t offset);

}  // namespace deltacheck::ops
