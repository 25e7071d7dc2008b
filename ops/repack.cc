// Repacking sequences of a case.
#include "ops/repack.h"

#include <cstring>
#include <stdexcept>

namespace deltacheck::ops {
namespace {

// Pieces of equal length cut from a batch layout stay a batch (one row each, no cu_seqlens): the
// probes (order: the rows reversed; split: every row cut at the same token) then ask a batch
// kernel about its own layout, not about packing, which it may not support (Transformers' torch
// functions ignore cu_seqlens: a packed row would show their packing leak on a batch case).
bool stays_batch(const cases::Layout& L, const std::vector<Piece>& pieces) {
  if (L.kind != cases::Layout::Kind::kBatch || pieces.size() < 2) return false;
  for (const Piece& p : pieces)
    if (p.length != pieces[0].length) return false;
  return true;
}

std::string layout_of(const std::vector<Piece>& pieces, bool batch) {
  if (batch)
    return "batch[" + std::to_string(pieces.size()) + "x" + std::to_string(pieces[0].length) + "]";
  if (pieces.size() == 1) return "single[" + std::to_string(pieces[0].length) + "]";
  std::string s = "packed[";
  for (size_t i = 0; i < pieces.size(); ++i) s += (i ? "," : "") + std::to_string(pieces[i].length);
  return s + "]";
}

// The shape of a token-major tensor with `rows` tokens, keeping the trailing dims.
std::vector<int64_t> token_shape(const cases::Tensor& t, int64_t total_rows, int64_t rows) {
  std::vector<int64_t> s = t.shape();
  const bool flat = !s.empty() && s[0] == total_rows;
  const bool rowed = s.size() >= 2 && s[0] * s[1] == total_rows;
  if (!flat && !rowed)
    throw std::invalid_argument("repack: token-major tensor '" + t.name() +
                                "' does not have the case's " + std::to_string(total_rows) +
                                " token rows");
  if (s.size() >= 2 && s[0] * s[1] == total_rows && !(s[0] == total_rows && s[1] != 1)) {
    s[0] = 1;
    s[1] = rows;
  } else {
    s[0] = rows;
  }
  return s;
}

}  // namespace

int64_t token_rows(const cases::Case& c) {
  return c.layout().total_tokens() + operation_for(c).tail_rows(c);
}

int64_t token_row(const cases::Layout& layout, int64_t seq, int64_t offset) {
  if (layout.kind == cases::Layout::Kind::kBatch) return seq * layout.row_length() + offset;
  return layout.cu_seqlens()[seq] + offset;
}

ByteRange row_bytes(const cases::Tensor& t, TensorMajor major, int64_t total_rows, int64_t first,
                    int64_t count) {
  const int64_t rows = major == TensorMajor::kSequence ? t.shape().at(0) : total_rows;
  if (rows <= 0) return {};
  const size_t row = t.nbytes() / static_cast<size_t>(rows);
  return {static_cast<const uint8_t*>(t.data()) + first * row, count * row};
}

std::vector<double> row_values(const std::vector<double>& v, int64_t total_rows, int64_t first,
                               int64_t count) {
  if (total_rows <= 0) return {};
  const size_t row = v.size() / static_cast<size_t>(total_rows);
  return std::vector<double>(v.begin() + first * row, v.begin() + (first + count) * row);
}

Repacked repack(const cases::Case& c, const cases::TensorMap& in, const std::vector<Piece>& pieces,
                const std::vector<std::pair<std::string, std::string>>& overrides) {
  const Operation& op = operation_for(c);
  const cases::Layout& L = c.layout();
  const int64_t total = token_rows(c), n = L.num_seqs();
  const bool batch = stays_batch(L, pieces);
  auto changes = overrides;
  changes.emplace_back("layout", layout_of(pieces, batch));
  if (op.tail_rows(c) > 0) changes.emplace_back("tail", "0");
  Repacked r{c.with(changes), {}};
  int64_t new_tokens = 0;
  for (const Piece& p : pieces) {
    if (p.seq < 0 || p.seq >= n || p.offset < 0 || p.offset + p.length > L.lengths[p.seq])
      throw std::invalid_argument("repack: piece outside its sequence");
    new_tokens += p.length;
  }
  for (const cases::Tensor& t : in.all()) {
    if (t.name() == "cu_seqlens") continue;
    const TensorMajor major = op.major(t.name());
    if (major == TensorMajor::kNone) {
      r.tensors.add(t);
      continue;
    }
    std::vector<int64_t> shape;
    if (major == TensorMajor::kToken) {
      shape = token_shape(t, total, new_tokens);
      const std::vector<int64_t>& was = t.shape();
      if (batch && was.size() >= 2 && was[0] == L.batch() && was[1] == L.lengths.at(0)) {
        // [B, T, ...] rows stay rows: [N, T, ...], the same bytes as [1, N T, ...]
        shape[0] = static_cast<int64_t>(pieces.size());
        shape[1] = pieces[0].length;
      }
    } else {
      shape = t.shape();
      shape[0] = static_cast<int64_t>(pieces.size());
    }
    cases::Tensor out(t.name(), t.dtype(), shape);
    uint8_t* dst = static_cast<uint8_t*>(out.data());
    for (const Piece& p : pieces) {
      const auto bytes = major == TensorMajor::kToken
                             ? row_bytes(t, major, total, token_row(L, p.seq, p.offset), p.length)
                             : row_bytes(t, major, total, p.seq, 1);
      if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
      dst += bytes.size();
    }
    r.tensors.add(std::move(out));
  }
  if (pieces.size() > 1 && !batch) {
    cases::Tensor cu("cu_seqlens", cases::DType::kI64, {static_cast<int64_t>(pieces.size()) + 1});
    int64_t acc = 0;
    cu.as<int64_t>()[0] = 0;
    for (size_t i = 0; i < pieces.size(); ++i) cu.as<int64_t>()[i + 1] = acc += pieces[i].length;
    r.tensors.add(std::move(cu));
  }
  return r;
}

}  // namespace deltacheck::ops
