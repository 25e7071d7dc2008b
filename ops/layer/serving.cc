// The layer's serving state (ops/layer/serving.h): pools, tables, outputs and the expectation of
// cache=pool and cache=accept, each through prefill evaluations of the layer (the FP64 oracle or
// a baseline), as gdr's serving modes are (ops/gdr/serving.cc).
#include "ops/layer/serving.h"

#include <algorithm>
#include <string>

#include "ops/repack.h"
#include "ops/schema.h"

namespace deltacheck::ops::layer {

int64_t pool_size(const Params& p) { return p.N + p.N / 2 + 1; }

std::vector<int32_t> pool_slots(const Params& p) {
  const int64_t padding = p.cache == Cache::kPool ? std::min(p.calls, p.N - 1) : 0;
  return slot_table(p.N, padding, pool_size(p), p.seed);
}

std::vector<int32_t> has_initial_state(const Params& p) {
  std::vector<int32_t> h(static_cast<size_t>(p.N), 1);
  for (int64_t s = 0; s < p.N; ++s)
    if (p.state == State::kNone || (p.state == State::kMixed && s % 2 == 0)) h[s] = 0;
  return h;
}

PoolRows accept_rows(const Params& p) {
  return pool_rows(std::vector<int64_t>(static_cast<size_t>(p.N), p.layout.lengths[0]), p.seed);
}

std::vector<int32_t> accepted_counts(const Params& p) {
  return ops::accepted_counts(p.N, p.layout.lengths[0], p.seed);
}

PoolRows ckpt_rows(const Params& p) {
  std::vector<int64_t> count;
  for (int64_t len : p.layout.lengths) count.push_back((len + p.calls - 1) / p.calls);
  return pool_rows(count, p.seed);
}

int64_t ckpt_max_blocks(const Params& p) {
  int64_t m = 1;
  for (int64_t len : p.layout.lengths) m = std::max(m, (len + p.calls - 1) / p.calls);
  return m;
}

int64_t conv_state_columns(const Params& p) {
  return p.cache == Cache::kAccept ? p.W - 2 + p.layout.lengths[0] : p.W - 1;
}

std::string check_serving(const Params& p) {
  if (p.cache == Cache::kCkpt)
    return p.calls < 2 ? "cache=ckpt takes the block size in calls: 2..2048 tokens" : "";
  if (p.calls > 64)
    return "calls must be <= 64 for cache=" +
           std::string(kCacheNames[static_cast<size_t>(p.cache)]) +
           " (only cache=ckpt takes block sizes up to 2048)";
  if (p.cache != Cache::kAccept && p.cache != Cache::kSpec) return "";
  const std::string mode = kCacheNames[static_cast<size_t>(p.cache)];
  for (int64_t l : p.layout.lengths)
    if (l != p.layout.lengths[0])
      return "cache=" + mode + " needs sequences of equal length (packed[T*N]: N sequences of T " +
             "tokens)";
  if (p.state == State::kNone)
    return "cache=" + mode + " reads states from a pool: state must not be none";
  return "";
}

namespace {

const std::vector<std::string>& token_inputs() {
  static const std::vector<std::string> names{"qkv",        "z",           "a",         "b",
                                              "cu_seqlens", "conv_weight", "conv_bias", "A_log",
                                              "dt_bias",    "norm_weight"};
  return names;
}

// The inputs a prefill evaluation reads (no pool, table or state).
cases::TensorMap prefill_inputs(const cases::TensorMap& in) {
  cases::TensorMap m;
  for (const std::string& name : token_inputs())
    if (const Tensor* t = in.find(name)) m.add(*t);
  return m;
}

// Values of the activation dtype (conv states are past inputs).
void fill_inputs_like(Tensor& t, const Stream& st, DType dtype) {
  Tensor tmp("x", dtype, {1});
  for (int64_t i = 0; i < t.numel(); ++i) {
    tmp.set(0, static_cast<float>(st.normal(static_cast<uint64_t>(i))));
    t.set(i, tmp.get(0));
  }
}

int64_t state_size(const Params& d) { return d.HV * d.K * d.V; }

// Rows nobody addresses, for must_be_unchanged.
std::vector<ElementRange> untouched(int64_t rows, int64_t per, const std::vector<bool>& used) {
  std::vector<ElementRange> r;
  for (int64_t i = 0; i < rows; ++i)
    if (!used[i])
      r.push_back({i * per, (i + 1) * per, "slot " + std::to_string(i) + " (addressed by nobody)"});
  return r;
}

}  // namespace

void generate_serving(const Params& p, cases::TensorMap& m) {
  const bool accept = p.cache == Cache::kAccept, ckpt = p.cache == Cache::kCkpt;
  const int64_t rows = accept ? accept_rows(p).rows : ckpt ? ckpt_rows(p).rows : pool_size(p);
  Tensor& pool = m.add(Tensor("state_pool", DType::kF32, {rows, p.HV, p.K, p.V}));
  const Stream sp(p.seed, "state_pool");
  for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, static_cast<float>(0.5 * sp.normal(i)));
  fill_inputs_like(
      m.add(Tensor("conv_state_pool", DType::kF32, {rows, p.D, conv_state_columns(p)})),
      Stream(p.seed, "conv_state_pool"), p.dtype);
  if (ckpt) {
    const PoolRows r = ckpt_rows(p);
    const int64_t cols = ckpt_max_blocks(p);
    Tensor& table = m.add(Tensor("block_slots", DType::kI32, {p.N, cols}));
    for (int64_t i = 0; i < table.numel(); ++i) table.as<int32_t>()[i] = -1;
    for (int64_t s = 0; s < p.N; ++s)
      for (size_t b = 0; b < r.rows_of[s].size(); ++b)
        table.as<int32_t>()[s * cols + static_cast<int64_t>(b)] =
            static_cast<int32_t>(r.rows_of[s][b]);
    return;
  }
  if (accept) {
    const PoolRows r = accept_rows(p);
    const int64_t T = p.layout.lengths[0];
    Tensor& idx = m.add(Tensor("state_indices", DType::kI32, {p.N, T}));
    for (int64_t s = 0; s < p.N; ++s)
      for (int64_t t = 0; t < T; ++t)
        idx.as<int32_t>()[s * T + t] = static_cast<int32_t>(r.rows_of[s][t]);
    const std::vector<int32_t> a = accepted_counts(p);
    std::copy(a.begin(), a.end(),
              m.add(Tensor("num_accepted_tokens", DType::kI32, {p.N})).as<int32_t>());
    return;
  }
  const std::vector<int32_t> slots = pool_slots(p), has = has_initial_state(p);
  std::copy(slots.begin(), slots.end(),
            m.add(Tensor("state_slots", DType::kI32, {p.N})).as<int32_t>());
  if (p.cache == Cache::kSpec) return;  // every request continues
  std::copy(has.begin(), has.end(),
            m.add(Tensor("has_initial_state", DType::kI32, {p.N})).as<int32_t>());
}

std::vector<OutputSpec> serving_outputs(const Params& p) {
  const bool accept = p.cache == Cache::kAccept;
  const int64_t per = state_size(p), cols = conv_state_columns(p), per_conv = p.D * cols;
  OutputSpec o{"o", p.dtype, {1, p.T, p.HV, p.V}, std::nullopt, 2.0};
  OutputSpec pool{"state_pool", DType::kF32, {0, p.HV, p.K, p.V}, p.dtype, 2.0};
  OutputSpec conv{"conv_state_pool", DType::kF32, {0, p.D, cols}};
  int64_t rows = 0;
  std::vector<bool> used, conv_used;
  if (accept || p.cache == Cache::kCkpt) {
    const PoolRows r = accept ? accept_rows(p) : ckpt_rows(p);
    rows = r.rows;
    used.assign(static_cast<size_t>(rows), false);
    conv_used = used;
    for (int64_t s = 0; s < p.N; ++s) {
      for (int64_t row : r.rows_of[s]) used[row] = true;
      if (accept) conv_used[r.rows_of[s][0]] = true;  // a verify's conv row is column 0's
    }
    if (!accept) conv_used = used;  // ckpt: every block's conv row too
  } else {
    rows = pool_size(p);
    used.assign(static_cast<size_t>(rows), false);
    const std::vector<int32_t> slots = pool_slots(p);
    const auto cu = p.layout.cu_seqlens();
    for (int64_t s = 0; s < p.N; ++s) {
      if (slots[s] >= 0) {
        used[slots[s]] = true;
        continue;
      }
      o.dont_care.push_back({cu[s] * p.HV * p.V, cu[s + 1] * p.HV * p.V, "padding entry"});
    }
    conv_used = used;
  }
  pool.shape[0] = conv.shape[0] = rows;
  pool.must_be_unchanged = untouched(rows, per, used);
  conv.must_be_unchanged = untouched(rows, per_conv, conv_used);
  if (p.cache != Cache::kSpec) return {o, pool, conv};
  const int64_t T = p.layout.lengths[0];
  return {o,
          pool,
          conv,
          {"token_states", DType::kF32, {p.N, T, p.HV, p.K, p.V}, p.dtype, 2.0},
          {"token_conv_states", DType::kF32, {p.N, T, p.D, p.W - 1}}};
}

std::vector<SeqSlice> serving_slices(const Params& p, const std::string& output) {
  const auto cu = p.layout.cu_seqlens();
  const int64_t per = output == "state_pool" || output == "token_states"
                          ? state_size(p)
                          : p.D * conv_state_columns(p);
  std::vector<SeqSlice> s;
  const bool accept = p.cache == Cache::kAccept, ckpt = p.cache == Cache::kCkpt;
  const PoolRows r = accept ? accept_rows(p) : ckpt ? ckpt_rows(p) : PoolRows{};
  const std::vector<int32_t> slots = accept || ckpt ? std::vector<int32_t>{} : pool_slots(p);
  for (int64_t i = 0; i < p.N; ++i) {
    if (output == "token_states" || output == "token_conv_states") {
      const int64_t T = p.layout.lengths[0];
      s.push_back({i, i * T * per, (i + 1) * T * per, per});
    } else if (output == "o") {
      s.push_back({i, cu[i] * p.HV * p.V, cu[i + 1] * p.HV * p.V, p.HV * p.V});
    } else if (ckpt || (accept && output == "state_pool")) {
      s.push_back({i, r.first[i] * per, (r.first[i] + r.count[i]) * per, 0});
    } else {
      const int64_t row = accept ? r.rows_of[i][0] : slots[i];
      s.push_back(row < 0 ? SeqSlice{i, 0, 0, 0} : SeqSlice{i, row * per, (row + 1) * per, 0});
    }
  }
  return s;
}

namespace {

// cache=pool: one prefill of every sequence from its rows (zeros where it has no initial state,
// and for padding entries, whose results are dropped), the final states scattered back.
Values evaluate_pool(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const int64_t per = state_size(d), per_conv = d.D * (d.W - 1);
  const int32_t* slots = in.at("state_slots").as<int32_t>();
  const int32_t* has = in.at("has_initial_state").as<int32_t>();
  const std::vector<double> pool = in.at("state_pool").to_double(),
                            conv = in.at("conv_state_pool").to_double();
  cases::TensorMap m = prefill_inputs(in);
  Tensor& s0 = m.add(Tensor("initial_state", DType::kF32, {d.N, d.HV, d.K, d.V}));
  Tensor& c0 = m.add(Tensor("initial_conv_state", DType::kF32, {d.N, d.D, d.W - 1}));
  for (int64_t s = 0; s < d.N; ++s) {
    const bool from_row = slots[s] >= 0 && has[s] != 0;
    for (int64_t j = 0; j < per; ++j)
      s0.set(s * per + j, from_row ? pool[slots[s] * per + j] : 0.0);
    for (int64_t j = 0; j < per_conv; ++j)
      c0.set(s * per_conv + j, from_row ? conv[slots[s] * per_conv + j] : 0.0);
  }
  Values r = eval(c.with({{"cache", "prefill"}, {"state", "rand"}}), m);
  Values out{{"o", std::move(r.at("o"))}, {"state_pool", pool}, {"conv_state_pool", conv}};
  for (int64_t s = 0; s < d.N; ++s) {
    if (slots[s] < 0) continue;
    std::copy_n(r.at("final_state").begin() + s * per, per,
                out["state_pool"].begin() + slots[s] * per);
    std::copy_n(r.at("final_conv_state").begin() + s * per_conv, per_conv,
                out["conv_state_pool"].begin() + slots[s] * per_conv);
  }
  return out;
}

// cache=accept and spec: every prefix of every sequence from its start state and conv window,
// the prefix of t tokens giving token t - 1's states. accept: from the accepted row and window,
// each token's state into its row, the conv row the window shifted by one with the call's tokens
// after it (copies of inputs); spec: from the sequence's rows, every token's states kept, the
// last token's into the rows.
Values evaluate_verify(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const bool spec = d.cache == Cache::kSpec;
  const int64_t T = d.layout.lengths[0], per = state_size(d), W = d.W, win = d.D * (W - 1);
  const int64_t cols = conv_state_columns(d), per_conv = d.D * cols;
  const int32_t* idx = in.at(spec ? "state_slots" : "state_indices").as<int32_t>();
  const int32_t* acc = spec ? nullptr : in.at("num_accepted_tokens").as<int32_t>();
  const std::vector<double> pool = in.at("state_pool").to_double(),
                            conv = in.at("conv_state_pool").to_double(),
                            qkv = in.at("qkv").to_double();
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.T * d.HV * d.V), 0.0)},
             {"state_pool", pool},
             {"conv_state_pool", conv}};
  if (spec) {
    out["token_states"].assign(static_cast<size_t>(d.N * T * per), 0.0);
    out["token_conv_states"].assign(static_cast<size_t>(d.N * T * win), 0.0);
  }
  std::vector<Piece> pieces;
  PieceState states{"initial_state", {d.HV, d.K, d.V}, {}};
  PieceState windows{"initial_conv_state", {d.D, W - 1}, {}};
  for (int64_t s = 0; s < d.N; ++s) {
    const int64_t a = spec ? 1 : acc[s], row = spec ? idx[s] : idx[s * T];
    const int64_t from = spec ? idx[s] : idx[s * T + a - 1];
    std::vector<double> window(static_cast<size_t>(win));
    for (int64_t ch = 0; ch < d.D; ++ch)
      for (int64_t j = 0; j < W - 1; ++j)
        window[ch * (W - 1) + j] = conv[row * per_conv + ch * cols + a - 1 + j];
    for (int64_t t = 1; t <= T; ++t) {
      pieces.push_back({s, 0, t});
      states.rows.emplace_back(pool.begin() + from * per, pool.begin() + (from + 1) * per);
      windows.rows.push_back(window);
    }
    if (spec) continue;
    double* dst = out["conv_state_pool"].data() + row * per_conv;
    for (int64_t ch = 0; ch < d.D; ++ch) {
      for (int64_t j = 0; j + 1 < W - 1; ++j) dst[ch * cols + j] = window[ch * (W - 1) + j + 1];
      for (int64_t t = 0; t < T; ++t)
        dst[ch * cols + W - 2 + t] = qkv[token_row(d.layout, s, t) * d.D + ch];
    }
  }
  const Values r = run_pieces(c, prefill_inputs(in), pieces, {states, windows},
                              {{"cache", "prefill"}, {"state", "rand"}}, eval);
  scatter_pieces(d.layout, pieces, d.HV * d.V, r.at("o"), out["o"],
                 [T](const Piece& p) { return p.length == T; });
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t s = pieces[i].seq, t = pieces[i].length - 1;
    auto state = r.at("final_state").begin() + static_cast<int64_t>(i) * per;
    auto conv_state = r.at("final_conv_state").begin() + static_cast<int64_t>(i) * win;
    if (!spec) {
      std::copy_n(state, per, out["state_pool"].begin() + idx[s * T + t] * per);
      continue;
    }
    std::copy_n(state, per, out["token_states"].begin() + (s * T + t) * per);
    std::copy_n(conv_state, win, out["token_conv_states"].begin() + (s * T + t) * win);
    if (t + 1 < T) continue;
    std::copy_n(state, per, out["state_pool"].begin() + idx[s] * per);
    std::copy_n(conv_state, win, out["conv_state_pool"].begin() + idx[s] * per_conv);
  }
  return out;
}

// cache=ckpt: block by block, every block a prefill piece from the states its previous block
// ended with (the initial states for block 0); each block's end states into its row.
Values evaluate_ckpt(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Params d = decode(c);
  const int64_t per = state_size(d), per_conv = d.D * (d.W - 1), bs = d.calls;
  const int32_t* table = in.at("block_slots").as<int32_t>();
  const int64_t cols = ckpt_max_blocks(d);
  Values out{{"o", std::vector<double>(static_cast<size_t>(d.T * d.HV * d.V), 0.0)},
             {"state_pool", in.at("state_pool").to_double()},
             {"conv_state_pool", in.at("conv_state_pool").to_double()}};
  std::vector<std::vector<double>> state(static_cast<size_t>(d.N), std::vector<double>(per, 0.0)),
      conv(static_cast<size_t>(d.N), std::vector<double>(per_conv, 0.0));
  const Tensor *s0 = in.find("initial_state"), *c0 = in.find("initial_conv_state");
  for (int64_t s = 0; s < d.N; ++s) {
    for (int64_t j = 0; s0 && j < per; ++j) state[s][j] = s0->get(s * per + j);
    for (int64_t j = 0; c0 && j < per_conv; ++j) conv[s][j] = c0->get(s * per_conv + j);
  }
  const cases::TensorMap tokens = prefill_inputs(in);
  for (int64_t b = 0; b < cols; ++b) {
    std::vector<Piece> pieces;
    PieceState states{"initial_state", {d.HV, d.K, d.V}, {}};
    PieceState windows{"initial_conv_state", {d.D, d.W - 1}, {}};
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t len = d.layout.lengths[s];
      if (b * bs >= len) continue;
      pieces.push_back({s, b * bs, std::min(bs, len - b * bs)});
      states.rows.push_back(state[s]);
      windows.rows.push_back(conv[s]);
    }
    if (pieces.empty()) continue;
    const Values r = run_pieces(c, tokens, pieces, {states, windows},
                                {{"cache", "prefill"}, {"state", "rand"}, {"calls", "3"}}, eval);
    scatter_pieces(d.layout, pieces, d.HV * d.V, r.at("o"), out["o"],
                   [](const Piece&) { return true; });
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t s = pieces[i].seq, row = table[s * cols + b];
      std::copy_n(r.at("final_state").begin() + static_cast<int64_t>(i) * per, per,
                  state[s].begin());
      std::copy_n(r.at("final_conv_state").begin() + static_cast<int64_t>(i) * per_conv, per_conv,
                  conv[s].begin());
      std::copy(state[s].begin(), state[s].end(), out["state_pool"].begin() + row * per);
      std::copy(conv[s].begin(), conv[s].end(), out["conv_state_pool"].begin() + row * per_conv);
    }
  }
  return out;
}

}  // namespace

Values evaluate_serving(const cases::Case& c, const cases::TensorMap& in, const Evaluate& eval) {
  const Cache mode = decode(c).cache;
  if (mode == Cache::kCkpt) return evaluate_ckpt(c, in, eval);
  return mode == Cache::kPool ? evaluate_pool(c, in, eval) : evaluate_verify(c, in, eval);
}

void serving_suite(SuiteBuilder& b, Tier t) {
  int seed = 5200;
  auto add = [&](SuiteParams p) {
    p.emplace_back("seed", std::to_string(seed++));
    b.add("layer", p);
  };
  // Pools with dirty rows: new requests (has_initial_state 0) of one token on recycled rows, in a
  // decode batch (every sequence one token) and in a mixed batch; padding entries.
  add({{"layout", "packed[1,5,1,9,1]"}, {"cache", "pool"}, {"state", "mixed"}, {"calls", "1"}});
  add({{"layout", "packed[1*8]"}, {"cache", "pool"}, {"state", "mixed"}, {"calls", "2"}});
  // Speculative verify: T = 5 tokens, every count 1..5 (4 and 5 above the conv width W - 1 = 3).
  add({{"layout", "packed[5*6]"}, {"cache", "accept"}});
  // One-token causal_conv1d_update calls: a call of one token, and a prefill followed by them.
  add({{"layout", "single[1]"}, {"cache", "decode"}});
  add({{"layout", "single[40]"}, {"cache", "dynamic"}, {"calls", "3"}});
  // Block checkpoints of both states, blocks of 2: shorter than the conv window W-1 = 3, so a
  // block end's conv state reaches back into the block before.
  add({{"layout", "packed[7,0,2,5]"}, {"cache", "ckpt"}, {"calls", "2"}});
  // Multi-token decode keeping both states after every token.
  add({{"layout", "packed[4*5]"}, {"cache", "spec"}});
  if (t == Tier::kSmoke) return;
  add({{"layout", "packed[6*3]"}, {"cache", "spec"}, {"dtype", "bf16"}});
  add({{"layout", "packed[2*7]"}, {"cache", "spec"}, {"dtype", "fp16"}, {"W", "3"}});
  add({{"layout", "single[1]"}, {"cache", "pool"}, {"state", "none"}});
  add({{"layout", "packed[1,5,1,9,1]"}, {"cache", "pool"}, {"state", "none"}, {"calls", "1"}});
  add({{"layout", "packed[1*8]"},
       {"cache", "pool"},
       {"state", "mixed"},
       {"calls", "2"},
       {"dtype", "bf16"}});
  add({{"layout", "packed[16,1,64,65]"}, {"cache", "pool"}, {"calls", "1"}, {"dtype", "fp16"}});
  add({{"layout", "packed[8*8]"}, {"cache", "accept"}, {"dtype", "bf16"}});
  add({{"layout", "packed[3*4]"}, {"cache", "accept"}, {"dtype", "fp16"}});
  add({{"layout", "packed[1*3]"}, {"cache", "accept"}});
  add({{"layout", "packed[5*6]"}, {"cache", "accept"}, {"W", "3"}, {"K", "8"}, {"V", "8"}});
  add({{"layout", "single[1]"}, {"cache", "decode"}, {"dtype", "bf16"}});
  add({{"layout", "single[70]"}, {"cache", "dynamic"}, {"calls", "4"}, {"W", "3"}});
  // Block checkpoints: 16 with lengths just under, at and over a block, 50 in bf16 from a zero
  // state.
  add({{"layout", "packed[15,16,17]"}, {"cache", "ckpt"}, {"calls", "16"}, {"state", "mixed"}});
  add({{"layout", "packed[130,3]"},
       {"cache", "ckpt"},
       {"calls", "50"},
       {"dtype", "bf16"},
       {"state", "none"}});
  if (t != Tier::kFull) return;
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    add({{"layout", "packed[100,1,300,1,2]"},
         {"cache", "pool"},
         {"state", "mixed"},
         {"calls", "1"},
         {"K", "64"},
         {"V", "64"},
         {"dtype", dt}});
    add({{"layout", "packed[16*12]"},
         {"cache", "accept"},
         {"K", "64"},
         {"V", "64"},
         {"dtype", dt}});
  }
  add({{"layout", "packed[1*32]"},
       {"cache", "pool"},
       {"state", "mixed"},
       {"calls", "5"},
       {"H", "4"},
       {"HV", "8"}});
  add({{"layout", "single[300]"}, {"cache", "dynamic"}, {"calls", "8"}, {"dtype", "bf16"}});
  for (const char* dt : {"fp32", "fp16"})
    add({{"layout", "packed[700,0,65,1]"},
         {"cache", "ckpt"},
         {"calls", "64"},
         {"dtype", dt},
         {"K", "64"},
         {"V", "64"}});
  add({{"layout", "single[900]"}, {"cache", "ckpt"}, {"calls", "2048"}});
}

}  // namespace deltacheck::ops::layer
