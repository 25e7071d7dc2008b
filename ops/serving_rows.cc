// The pool rows and accepted counts of the serving modes (ops/serving_rows.h).
#include "ops/serving_rows.h"

#include <algorithm>
#include <utility>

namespace deltacheck::ops {

std::vector<int64_t> shuffled(int64_t n, const cases::Stream& st, uint64_t at) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[i],
              order[static_cast<int64_t>(st.uniform(at + i) * static_cast<double>(i + 1))]);
  return order;
}

PoolRows pool_rows(const std::vector<int64_t>& count, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(count.size());
  PoolRows p;
  p.count = count;
  p.first.assign(static_cast<size_t>(n), 0);
  p.rows_of.resize(static_cast<size_t>(n));
  const cases::Stream st(seed, "serving_slots");
  const std::vector<int64_t> order = shuffled(n, st, 0);
  int64_t row = 1;
  uint64_t at = static_cast<uint64_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t q = order[i];
    p.first[q] = row;
    const std::vector<int64_t> inside = shuffled(count[q], st, at);
    at += static_cast<uint64_t>(count[q]);
    for (int64_t b = 0; b < count[q]; ++b) p.rows_of[q].push_back(row + inside[b]);
    row += count[q] + (i % 2 == 0 ? 1 : 0);
  }
  p.rows = row;
  return p;
}

std::vector<int32_t> slot_table(int64_t n, int64_t padding, int64_t rows, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  const cases::Stream sh(seed, "state_slots");
  for (int64_t i = rows - 1; i > 0; --i)  // Fisher-Yates with our own uniform
    std::swap(order[i], order[static_cast<int64_t>(sh.uniform(i) * static_cast<double>(i + 1))]);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) out[s] = s >= n - padding ? -1 : static_cast<int32_t>(order[s]);
  return out;
}

std::vector<int32_t> accepted_counts(int64_t n, int64_t t, uint64_t seed) {
  const cases::Stream st(seed, "num_accepted_tokens");
  const int64_t shift = static_cast<int64_t>(st.uniform(0) * static_cast<double>(t));
  std::vector<int32_t> a(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) a[s] = static_cast<int32_t>(1 + (s + shift) % t);
  return a;
}

Values run_pieces(const cases::Case& c, const cases::TensorMap& tokens,
                  const std::vector<Piece>& pieces, const std::vector<PieceState>& states,
                  const std::vector<std::pair<std::string, std::string>>& overrides,
                  const Evaluate& eval) {
  Repacked rp = repack(c, tokens, pieces, overrides);
  for (const PieceState& st : states) {
    std::vector<int64_t> shape{static_cast<int64_t>(pieces.size())};
    int64_t per = 1;
    for (int64_t d : st.dims) shape.push_back(d), per *= d;
    cases::Tensor t(st.name, st.dtype, shape);
    for (size_t i = 0; i < pieces.size(); ++i)
      for (int64_t j = 0; j < per; ++j) t.set(static_cast<int64_t>(i) * per + j, st.rows[i][j]);
    rp.tensors.add(std::move(t));
  }
  return eval(rp.c, rp.tensors);
}

void scatter_pieces(const cases::Layout& layout, const std::vector<Piece>& pieces, int64_t row,
                    const std::vector<double>& from, std::vector<double>& dst,
                    const std::function<bool(const Piece&)>& keep) {
  int64_t token = 0;
  for (const Piece& p : pieces) {
    if (keep(p)) {
      const int64_t at = token_row(layout, p.seq, p.offset);
      std::copy_n(from.begin() + token * row, p.length * row, dst.begin() + at * row);
    }
    token += p.length;
  }
}

}  // namespace deltacheck::ops
