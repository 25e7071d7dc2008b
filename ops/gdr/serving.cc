// The gdr serving kernel contracts (serving.h): slot tables, inputs, outputs and their
// expectations. Both modes are evaluated as plain prefills of repacked pieces, like the pool modes
// (operation.cc): ckpt block by block, each block's piece starting from the state its previous
// block ended with; accept as one prefix per token from the accepted row; tree level by level
// (every token of depth d as a one-token piece from its parent's state, carried in FP64).
#include "ops/gdr/serving.h"

#include <algorithm>
#include <utility>

#include "ops/repack.h"
#include "ops/schema.h"
#include "ops/serving_rows.h"

namespace deltacheck::ops::gdr {

int64_t ckpt_block_size(const Params& p) { return p.calls; }

int64_t ckpt_blocks(const Params& p, int64_t seq) {
  const int64_t bs = ckpt_block_size(p);
  return (p.layout.lengths[seq] + bs - 1) / bs;
}

int64_t ckpt_max_blocks(const Params& p) {
  int64_t m = 1;
  for (int64_t s = 0; s < p.N; ++s) m = std::max(m, ckpt_blocks(p, s));
  return m;
}

ServingSlots serving_slots(const Params& p) {
  ServingSlots s;
  const bool ckpt = p.cache == Cache::kCkpt, tree = p.cache == Cache::kTree;
  s.columns = ckpt ? ckpt_max_blocks(p) : p.T;
  if (tree) s.start.assign(static_cast<size_t>(p.N), 0);
  s.table.assign(static_cast<size_t>(p.N * s.columns), -1);
  // tree: the token rows and the start row.
  std::vector<int64_t> count(static_cast<size_t>(p.N));
  for (int64_t q = 0; q < p.N; ++q) count[q] = ckpt ? ckpt_blocks(p, q) : p.T + (tree ? 1 : 0);
  const PoolRows rows = pool_rows(count, p.seed);
  s.first = rows.first;
  s.count = rows.count;
  for (int64_t q = 0; q < p.N; ++q)
    for (int64_t b = 0; b < count[q]; ++b) {
      if (tree && b == p.T)
        s.start[q] = rows.rows_of[q][b];
      else
        s.table[q * s.columns + b] = static_cast<int32_t>(rows.rows_of[q][b]);
    }
  s.rows = rows.rows;
  return s;
}

std::vector<int32_t> accepted_counts(const Params& p) {
  return ops::accepted_counts(p.N, p.T, p.seed);
}

const char* name(TreeShape t) {
  static const char* const kNames[] = {"chain", "fan", "star", "random tree"};
  return kNames[static_cast<int>(t)];
}

TreeShape tree_shape(const Params& p, int64_t seq) {
  const Stream st(p.seed, "tree_shape");
  const int64_t shift = static_cast<int64_t>(st.uniform(0) * 4.0);
  return static_cast<TreeShape>((seq + shift) % 4);
}

std::vector<int32_t> tree_parents(const Params& p) {
  std::vector<int32_t> parents(static_cast<size_t>(p.N * p.T), -1);
  const Stream st(p.seed, "parents");
  for (int64_t s = 0; s < p.N; ++s) {
    const TreeShape shape = tree_shape(p, s);
    for (int64_t t = 1; t < p.T; ++t) {
      int64_t parent = -1;  // star: every token from the start state
      if (shape == TreeShape::kChain) parent = t - 1;
      if (shape == TreeShape::kFan) parent = 0;
      if (shape == TreeShape::kRandom)  // uniform in -1 .. t - 1
        parent = static_cast<int64_t>(st.uniform(static_cast<uint64_t>(s * p.T + t)) *
                                      static_cast<double>(t + 1)) -
                 1;
      parents[s * p.T + t] = static_cast<int32_t>(parent);
    }
  }
  return parents;
}

std::string describe_tree_token(const Params& p, int64_t seq, int64_t token) {
  if (seq < 0 || seq >= p.N) return "";
  const std::string shape =
      p.T == 1 ? std::string("a single node")
               : std::string("a ") + name(tree_shape(p, seq)) + " of " + std::to_string(p.T);
  if (token < 0 || token >= p.T) return "request " + std::to_string(seq) + ": " + shape;
  const int32_t parent = tree_parents(p)[seq * p.T + token];
  return "token " + std::to_string(token) + " of request " + std::to_string(seq) + ", parent " +
         (parent < 0 ? std::string("-1 (the start state)") : std::to_string(parent)) + ", in " +
         shape;
}

std::string check_serving(const Params& p) {
  if (p.cache == Cache::kCkpt) {
    if (p.calls < 16)
      return "cache=ckpt takes the block size in calls: 16..2048 tokens (calls=" +
             std::to_string(p.calls) + ")";
    return "";
  }
  const bool tree = p.cache == Cache::kTree;
  if (p.layout.kind != cases::Layout::Kind::kBatch)
    return tree ? "cache=tree needs layout batch[NxT] (N requests of T draft tokens)"
                : "cache=accept needs layout batch[NxT] (N sequences of 1 + k tokens)";
  if (p.state == State::kNone)
    return std::string("cache=") + name(p.cache) +
           " reads states from a pool: state must not be none";
  return "";
}

void generate_serving(const Params& p, cases::TensorMap& m) {
  const ServingSlots slots = serving_slots(p);
  Tensor& pool = m.add(Tensor("state_pool", DType::kF32, {slots.rows, p.HV, p.K, p.V}));
  const Stream sp(p.seed, "state_pool");
  for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, static_cast<float>(0.5 * sp.normal(i)));
  const bool ckpt = p.cache == Cache::kCkpt;
  Tensor& table =
      m.add(Tensor(ckpt ? "block_slots" : "state_indices", DType::kI32, {p.N, slots.columns}));
  std::copy(slots.table.begin(), slots.table.end(), table.as<int32_t>());
  if (ckpt) return;
  if (p.cache == Cache::kTree) {
    Tensor& start = m.add(Tensor("state_slots", DType::kI32, {p.N}));
    for (int64_t s = 0; s < p.N; ++s) start.as<int32_t>()[s] = static_cast<int32_t>(slots.start[s]);
    const std::vector<int32_t> parents = tree_parents(p);
    Tensor& par = m.add(Tensor("parents", DType::kI32, {p.N, p.T}));
    std::copy(parents.begin(), parents.end(), par.as<int32_t>());
    return;
  }
  const std::vector<int32_t> a = accepted_counts(p);
  Tensor& acc = m.add(Tensor("num_accepted_tokens", DType::kI32, {p.N}));
  std::copy(a.begin(), a.end(), acc.as<int32_t>());
}

std::vector<OutputSpec> serving_outputs(const Params& p) {
  const ServingSlots slots = serving_slots(p);
  const int64_t per = p.HV * p.K * p.V;
  OutputSpec pool{"state_pool", DType::kF32, {slots.rows, p.HV, p.K, p.V}, p.dtype};
  std::vector<bool> used(static_cast<size_t>(slots.rows), false);
  for (int32_t r : slots.table)
    if (r >= 0) used[r] = true;
  for (int64_t r = 0; r < slots.rows; ++r)
    if (!used[r] && std::find(slots.start.begin(), slots.start.end(), r) == slots.start.end())
      pool.must_be_unchanged.push_back(
          {r * per, (r + 1) * per, "slot " + std::to_string(r) + " (addressed by nobody)"});
  for (size_t s = 0; s < slots.start.size(); ++s)  // tree: the start rows are only read
    pool.must_be_unchanged.push_back({slots.start[s] * per, (slots.start[s] + 1) * per,
                                      "slot " + std::to_string(slots.start[s]) + " (request " +
                                          std::to_string(s) + "'s start state, read only)"});
  return {{"o", p.dtype, {p.B, p.T, p.HV, p.V}}, pool};
}

std::vector<SeqSlice> serving_pool_slices(const Params& p) {
  const ServingSlots slots = serving_slots(p);
  const int64_t per = p.HV * p.K * p.V;
  std::vector<SeqSlice> s;
  for (int64_t q = 0; q < p.N; ++q)
    s.push_back({q, slots.first[q] * per, (slots.first[q] + slots.count[q]) * per, 0});
  return s;
}

namespace {

// The inputs a prefill evaluation reads (no pool, slots or states).
cases::TensorMap prefill_inputs(const cases::TensorMap& in) {
  cases::TensorMap m;
  for (const char* name : {"q", "k", "v", "g", "beta", "cu_seqlens"})
    if (const Tensor* t = in.find(name)) m.add(*t);
  return m;
}

// Runs `pieces` as one prefill, piece i starting from initial[i] (per doubles each, handed over
// in `state_dtype`).
Values run_pieces(const cases::Case& c, const cases::TensorMap& in,
                  const std::vector<Piece>& pieces, const std::vector<std::vector<double>>& initial,
                  const Evaluate& eval, DType state_dtype = DType::kF32) {
  const Params d = decode(c);
  return ops::run_pieces(c, prefill_inputs(in), pieces,
                         {{"initial_state", {d.HV, d.K, d.V}, initial, state_dtype}},
                         {{"cache", "prefill"}, {"state", "rand"}, {"calls", "3"}}, eval);
}

// Copies piece rows of the repacked o into the case's o.
void scatter_o(const Params& d, const std::vector<Piece>& pieces, const std::vector<double>& o,
               std::vector<double>& dst, bool (*keep)(const Params&, const Piece&)) {
  scatter_pieces(d.layout, pieces, d.HV * d.V, o, dst, [&](const Piece& p) { return keep(d, p); });
}

Values evaluate_ckpt(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const int64_t per = d.HV * d.K * d.V, bs = ckpt_block_size(d);
  const ServingSlots slots = serving_slots(d);
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.B * d.T * d.HV * d.V), 0.0)},
             {"state_pool", in.at("state_pool").to_double()}};
  // Each sequence's running state, from its initial state.
  std::vector<std::vector<double>> state(static_cast<size_t>(d.N),
                                         std::vector<double>(static_cast<size_t>(per), 0.0));
  if (const Tensor* s0 = in.find("initial_state"))
    for (int64_t s = 0; s < d.N; ++s)
      for (int64_t j = 0; j < per; ++j) state[s][j] = s0->get(s * per + j);
  const cases::TensorMap tokens = prefill_inputs(in);
  for (int64_t b = 0; b < ckpt_max_blocks(d); ++b) {
    std::vector<Piece> pieces;
    std::vector<std::vector<double>> initial;
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t len = d.layout.lengths[s];
      if (b * bs >= len) continue;
      pieces.push_back({s, b * bs, std::min(bs, len - b * bs)});
      initial.push_back(state[s]);
    }
    if (pieces.empty()) continue;
    const Values r = run_pieces(c, tokens, pieces, initial, eval);
    scatter_o(d, pieces, r.at("o"), out["o"], [](const Params&, const Piece&) { return true; });
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t s = pieces[i].seq;
      std::copy_n(r.at("final_state").begin() + static_cast<int64_t>(i) * per, per,
                  state[s].begin());
      const int32_t row = slots.table[s * slots.columns + b];
      std::copy(state[s].begin(), state[s].end(), out["state_pool"].begin() + row * per);
    }
  }
  return out;
}

Values evaluate_accept(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const int64_t per = d.HV * d.K * d.V;
  const int32_t* idx = in.at("state_indices").as<int32_t>();
  const int32_t* acc = in.at("num_accepted_tokens").as<int32_t>();
  const std::vector<double> pool = in.at("state_pool").to_double();
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.B * d.T * d.HV * d.V), 0.0)},
             {"state_pool", pool}};
  std::vector<Piece> pieces;
  std::vector<std::vector<double>> initial;
  for (int64_t s = 0; s < d.N; ++s) {
    const int32_t from = idx[s * d.T + acc[s] - 1];
    for (int64_t t = 1; t <= d.T; ++t) {
      pieces.push_back({s, 0, t});
      initial.emplace_back(pool.begin() + from * per, pool.begin() + (from + 1) * per);
    }
  }
  const Values r = run_pieces(c, prefill_inputs(in), pieces, initial, eval);
  scatter_o(d, pieces, r.at("o"), out["o"],
            [](const Params& p, const Piece& x) { return x.length == p.T; });
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int32_t row = idx[pieces[i].seq * d.T + pieces[i].length - 1];
    std::copy_n(r.at("final_state").begin() + static_cast<int64_t>(i) * per, per,
                out["state_pool"].begin() + row * per);
  }
  return out;
}

// Level by level: the tokens of depth d (d parents above them) as one-token pieces, each from
// its parent's state (depth 0: the start row), every token's state into its row.
Values evaluate_tree(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const int64_t per = d.HV * d.K * d.V;
  const int32_t* idx = in.at("state_indices").as<int32_t>();
  const int32_t* start = in.at("state_slots").as<int32_t>();
  const int32_t* parents = in.at("parents").as<int32_t>();
  const std::vector<double> pool = in.at("state_pool").to_double();
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.B * d.T * d.HV * d.V), 0.0)},
             {"state_pool", pool}};
  std::vector<int64_t> depth(static_cast<size_t>(d.N * d.T), 0);
  int64_t deepest = 0;
  for (int64_t i = 0; i < d.N * d.T; ++i) {
    const int32_t parent = parents[i];
    depth[i] = parent < 0 ? 0 : depth[i - i % d.T + parent] + 1;
    deepest = std::max(deepest, depth[i]);
  }
  std::vector<std::vector<double>> state(static_cast<size_t>(d.N * d.T));
  const cases::TensorMap tokens = prefill_inputs(in);
  for (int64_t level = 0; level <= deepest; ++level) {
    std::vector<Piece> pieces;
    std::vector<std::vector<double>> initial;
    for (int64_t i = 0; i < d.N * d.T; ++i) {
      if (depth[i] != level) continue;
      const int64_t s = i / d.T, parent = parents[i];
      pieces.push_back({s, i % d.T, 1});
      if (parent < 0)
        initial.emplace_back(pool.begin() + start[s] * per, pool.begin() + (start[s] + 1) * per);
      else
        initial.push_back(state[s * d.T + parent]);
    }
    const Values r = run_pieces(c, tokens, pieces, initial, eval, DType::kF64);
    scatter_o(d, pieces, r.at("o"), out["o"], [](const Params&, const Piece&) { return true; });
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t token = pieces[i].seq * d.T + pieces[i].offset;
      auto from = r.at("final_state").begin() + static_cast<int64_t>(i) * per;
      state[token].assign(from, from + per);
      std::copy_n(from, per, out["state_pool"].begin() + idx[token] * per);
    }
  }
  return out;
}

}  // namespace

Values evaluate_serving(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Cache mode = decode(c).cache;
  if (mode == Cache::kTree) return evaluate_tree(c, in, eval);
  return mode == Cache::kCkpt ? evaluate_ckpt(c, in, eval) : evaluate_accept(c, in, eval);
}

}  // namespace deltacheck::ops::gdr
