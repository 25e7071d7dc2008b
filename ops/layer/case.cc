// The layer operation: the whole linear-attention layer around the rule (short causal conv over
// the mixed q|k|v channels, SiLU, split, L2 norm, gates, gated delta rule, gated RMS norm), with
// recurrent and conv states in and out.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "cases/det_math.h"
#include "ops/decode.h"
#include "ops/layer/params.h"
#include "ops/layer/serving.h"
#include "ops/regimes.h"
#include "ops/schema.h"

namespace deltacheck::ops::layer {

// Its conv, gates and norm run per token, and the FP64 layer takes at least one: a layer case
// given over no token at all is refused (zero-length sequences belong in packs that hold tokens;
// the probes' derived case of one run alone is not checked).
Status check_zero_tokens(const Case& c) {
  if (c.layout().total_tokens() > 0) return Status::Ok();
  return invalid("layout=" + c.get("layout") +
                 " holds no token: a layer case needs at least one (zero-length sequences go in "
                 "packs with tokens, e.g. packed[0,37,64])");
}

namespace {

Status check_layer(const Case& c) {
  if (Status st = check_heads(c); !st.ok()) return st;
  if (c.layout().kind == Layout::Kind::kBatch)
    return invalid("layer cases are packed or single (the layer takes [T, D] rows)");
  // Converged memory wants v_t = S^T k_t + a small residual and no decay. In the layer v_t is
  // SiLU's output (never below -0.2785) while S^T k_t takes either sign, and
  // g = -exp(A_log) softplus(a + dt_bias) is never 0: no input puts the layer's rule there. The
  // rule the layer wraps is judged there by gdr's and gdr_grad's converged cases.
  if (decode_regime(c) == Regime::kConverged)
    return invalid(
        "regime=converged does not apply to the layer: its v is SiLU's output (>= -0.2785) while "
        "S^T k takes either sign, and its g = -exp(A_log) softplus(a + dt_bias) is never 0 "
        "(gdr and gdr_grad take regime=converged)");
  if (Status st = check_none_and_decode(c); !st.ok()) return st;
  if (std::string why = check_serving(decode(c)); !why.empty()) return invalid(std::move(why));
  return Status::Ok();
}

OpSchema layer_schema() {
  return OpSchema{
      "layer",
      "linear-attention layer: conv1d+SiLU -> q,k,v -> L2 norm -> gates -> rule -> gated norm",
      {
          {"layout",
           ParamSpec::Kind::kLayout,
           "single[64]",
           {},
           0,
           0,
           "token layout (single or packed)"},
          integer("H", "2", 1, 256, "q/k heads"),
          integer("HV", "4", 1, 1024, "value heads (HV % H == 0)"),
          integer("K", "32", 1, 512, "key head dim"),
          integer("V", "32", 1, 512, "value head dim"),
          integer("W", "4", 2, 4, "conv width"),
          integer("bias", "1", 0, 1, "conv bias"),
          choice("dtype", "fp32", {"fp32", "bf16", "fp16"}, "activations' dtype (weights fp32)"),
          choice("state", "rand", {"none", "rand", "mixed"},
                 "initial recurrent and conv states: none (zeros) | rand (random) | mixed "
                 "(alternating)"),
          choice(
              "cache", "prefill",
              {"none", "prefill", "decode", "chunked", "dynamic", "pool", "accept", "ckpt", "spec"},
              "as for gdr; conv states are carried with recurrent states | pool: both in "
              "slot-addressed pools, has_initial_state, padding entries | accept: speculative "
              "verify, the conv window rolled to the accepted token | ckpt: both states at "
              "every block boundary into pool rows | spec: multi-token decode keeping both "
              "states after every token (docs/serving.md)"),
          integer("calls", "3", 1, 2048,
                  "chunked: pieces per sequence; dynamic: decode steps; pool: padding entries; "
                  "ckpt: block size in tokens (2..2048; other modes: at most 64)"),
          regime_param(
              {Regime::kRand, Regime::kConverged, Regime::kTinyQK, Regime::kHugeQK, Regime::kCorrK},
              "the rule's inputs after the conv: random | (converged: refused, see "
              "docs/cases.md#regimes) | q/k token norms near [1e-4, 1e-2] | near [1e2, "
              "1e4] (the conv's q/k input channels, bias and conv state scaled) | keys "
              "of a sequence correlated (the conv's k input channels)"),
          integer("seed", "0", 0, int64_t{1} << 62, "generator seed"),
      },
      check_layer,
      check_zero_tokens};
}

Stream seq_stream(const Params& d, const GenOptions& o, const std::string& tensor, int64_t s) {
  return sequence_stream(d.seed, o, tensor, s);
}

// Token-major activations: each sequence's rows from its own stream.
void fill_tokens(const GenOptions& o, const Params& d, Tensor& t, int64_t per_token, double scale) {
  const auto cu = d.layout.cu_seqlens();
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream st = seq_stream(d, o, t.name(), s);
    for (int64_t i = 0; i < d.layout.lengths[s] * per_token; ++i)
      t.set(cu[s] * per_token + i, static_cast<float>(scale * st.normal(static_cast<uint64_t>(i))));
  }
}

// The regimes (ops/regimes.h) act on the conv's q/k input channels, so that the rule's q and k,
// the conv's SiLU outputs, land in them. `Placement` turns one row of q|k input channels (a
// token's, or one column of the conv state: a past token's) into the regime's.
//   tinyqk / hugeqk: each q and k head's row scaled to norm n * gain, n drawn log-uniform in the
//   regime's range: the conv's output per channel is ~N(0, sum_w w^2 x^2) with sum_w w^2 ~ 1, so
//   its norm over a head is ~n * gain (the rms of the window's n), and SiLU halves a tiny one
//   (silu(y) ~ y / 2: gain 2) and keeps the positive half of a huge one (~relu: gain sqrt(2)).
//   Their conv bias channels are scaled to min / sqrt(K) of the range (norm ~0.1 min), else a bias
//   of 0.1 would set the norm's floor. The norms after the conv are measured, not assumed
//   (tests/ops/test_grad_layer_regimes.cc).
//   corrk: each k head's row sqrt(c) base + sqrt(1 - c) row (base: one per sequence and k head),
//   the same construction as gdr's keys; the conv mixes a channel's inputs over W tokens with the
//   same weights, so its outputs share the base's direction too.
struct Placement {
  const Params& d;
  Stream norm, corr;
  // Row `row` (2 H K values: q heads, then k heads) of the thing `index` counts (a token, or a
  // conv state column).
  void place(double* row, uint64_t index) const {
    const int64_t K = d.K, H = d.H;
    if (d.regime == Regime::kCorrK)
      for (int64_t h = 0; h < H; ++h)
        correlate_key(corr, static_cast<uint64_t>(h * K), K, row + (H + h) * K);
    const double gain = d.regime == Regime::kTinyQK ? 2.0 : std::sqrt(2.0);
    for (int64_t j = 0; j < 2 * H; ++j) {
      const double n = qk_token_norm(d.regime, norm, index * static_cast<uint64_t>(2 * H) + j);
      if (n == 0.0) continue;
      double ss = 0.0;
      for (int64_t i = 0; i < K; ++i) ss += row[j * K + i] * row[j * K + i];
      if (ss > 0.0)
        for (int64_t i = 0; i < K; ++i) row[j * K + i] *= n * gain / std::sqrt(ss);
    }
  }
};

Placement placement(const Params& d, const GenOptions& o, const std::string& of, int64_t s) {
  return {d, seq_stream(d, o, of + "/norm", s), seq_stream(d, o, "qkv/corr", s)};
}

// qkv: N(0,1) per sequence (fill_tokens' values), the q/k channels placed in the regime.
void fill_qkv(const GenOptions& o, const Params& d, Tensor& t) {
  if (d.regime == Regime::kRand) return fill_tokens(o, d, t, d.D, 1.0);
  const auto cu = d.layout.cu_seqlens();
  std::vector<double> row(static_cast<size_t>(d.D));
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream st = seq_stream(d, o, t.name(), s);
    const Placement at = placement(d, o, "qkv", s);
    for (int64_t tok = 0; tok < d.layout.lengths[s]; ++tok) {
      for (int64_t i = 0; i < d.D; ++i) row[i] = st.normal(static_cast<uint64_t>(tok * d.D + i));
      at.place(row.data(), static_cast<uint64_t>(tok));
      for (int64_t i = 0; i < d.D; ++i) t.set((cu[s] + tok) * d.D + i, static_cast<float>(row[i]));
    }
  }
}

// A pool's conv rows are past inputs too: under a regime each row's columns get the q/k channel
// norms (and correlated keys) the initial conv states get, from streams of the row (pools belong
// to no sequence: not salted), then are rounded to the activation dtype again. regime=rand keeps
// the pool as generate_serving made it, bit for bit.
void place_conv_pool(const Params& d, Tensor& pool) {
  if (d.regime == Regime::kRand) return;
  const int64_t rows = pool.shape()[0], cols = pool.shape()[2], qk = 2 * d.H * d.K;
  std::vector<double> row(static_cast<size_t>(qk));
  Tensor tmp("x", d.dtype, {1});
  for (int64_t r = 0; r < rows; ++r) {
    const std::string of = "conv_state_pool/" + std::to_string(r);
    const Placement at{d, Stream(d.seed, of + "/norm"), Stream(d.seed, of + "/corr")};
    const int64_t base = r * d.D * cols;
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t ch = 0; ch < qk; ++ch) row[ch] = pool.get(base + ch * cols + j);
      at.place(row.data(), static_cast<uint64_t>(j));
      for (int64_t ch = 0; ch < qk; ++ch) {
        tmp.set(0, static_cast<float>(row[ch]));
        pool.set(base + ch * cols + j, tmp.get(0));
      }
    }
  }
}

TensorMap generate_layer(const Case& c, const GenOptions& o) {
  const Params d = decode(c);
  TensorMap m;
  fill_qkv(o, d, m.add(Tensor("qkv", d.dtype, {1, d.T, d.D})));
  fill_tokens(o, d, m.add(Tensor("z", d.dtype, {1, d.T, d.HV, d.V})), d.HV * d.V, 1.0);
  fill_tokens(o, d, m.add(Tensor("a", d.dtype, {1, d.T, d.HV})), d.HV, 1.0);
  fill_tokens(o, d, m.add(Tensor("b", d.dtype, {1, d.T, d.HV})), d.HV, 1.0);
  // Weights: shared by every sequence (not salted).
  const Stream w(d.seed, "weights");
  Tensor& cw = m.add(Tensor("conv_weight", DType::kF32, {d.D, d.W}));
  for (int64_t i = 0; i < cw.numel(); ++i)
    cw.set(i, static_cast<float>(w.normal(i) / std::sqrt(static_cast<double>(d.W))));
  if (d.bias) {
    Tensor& cb = m.add(Tensor("conv_bias", DType::kF32, {d.D}));
    const bool scaled = d.regime == Regime::kTinyQK || d.regime == Regime::kHugeQK;
    const double qk_scale = (d.regime == Regime::kTinyQK ? kTinyNormMin : kHugeNormMin) /
                            std::sqrt(static_cast<double>(d.K));
    for (int64_t i = 0; i < d.D; ++i)
      cb.set(i, static_cast<float>((scaled && i < 2 * d.H * d.K ? qk_scale : 1.0) * 0.1 *
                                   w.normal(1000000 + i)));
  }
  Tensor& alog = m.add(Tensor("A_log", DType::kF32, {d.HV}));
  Tensor& dtb = m.add(Tensor("dt_bias", DType::kF32, {d.HV}));
  for (int64_t h = 0; h < d.HV; ++h) {
    alog.set(h, static_cast<float>(w.uniform(2000000 + h, -1.0, 1.5)));
    dtb.set(h, static_cast<float>(w.uniform(3000000 + h, -1.0, 1.0)));
  }
  Tensor& nw = m.add(Tensor("norm_weight", DType::kF32, {d.V}));
  for (int64_t i = 0; i < d.V; ++i)
    nw.set(i, static_cast<float>(1.0 + 0.1 * w.normal(4000000 + i)));
  if (d.layout.has_cu_seqlens()) {
    const auto cu = d.layout.cu_seqlens();
    Tensor& t = m.add(Tensor("cu_seqlens", DType::kI64, {static_cast<int64_t>(cu.size())}));
    for (size_t i = 0; i < cu.size(); ++i) t.as<int64_t>()[i] = cu[i];
  }
  if (d.serving()) {
    generate_serving(d, m);  // the pools (ops/layer/serving.h)
    place_conv_pool(d, m.at("conv_state_pool"));
  }
  if (d.pooled()) return m;  // the states in are in them
  if (d.states() && d.state != State::kNone) {
    Tensor& s0 = m.add(Tensor("initial_state", DType::kF32, {d.N, d.HV, d.K, d.V}));
    Tensor& c0 = m.add(Tensor("initial_conv_state", DType::kF32, {d.N, d.D, d.W - 1}));
    const int64_t per = d.HV * d.K * d.V, per_conv = d.D * (d.W - 1);
    for (int64_t s = 0; s < d.N; ++s) {
      const bool fresh = d.state == State::kMixed && s % 2 == 0;
      const Stream st = seq_stream(d, o, "initial_state", s), sc = seq_stream(d, o, "conv", s);
      for (int64_t i = 0; i < per; ++i)
        s0.set(s * per + i, fresh ? 0.0 : static_cast<float>(0.3 * st.normal(i)));
      // Conv states are past inputs: representable in the activation dtype, and in the regime
      // as the inputs are (column j of the state is the input W - 1 - j tokens back).
      std::vector<double> x(static_cast<size_t>(per_conv));
      for (int64_t i = 0; i < per_conv; ++i) x[i] = fresh ? 0.0 : sc.normal(i);
      if (d.regime != Regime::kRand && !fresh) {
        const Placement at = placement(d, o, "conv", s);
        std::vector<double> row(static_cast<size_t>(2 * d.H * d.K));
        for (int64_t j = 0; j < d.W - 1; ++j) {
          for (size_t ch = 0; ch < row.size(); ++ch) row[ch] = x[ch * (d.W - 1) + j];
          at.place(row.data(), static_cast<uint64_t>(j));
          for (size_t ch = 0; ch < row.size(); ++ch) x[ch * (d.W - 1) + j] = row[ch];
        }
      }
      for (int64_t i = 0; i < per_conv; ++i) {
        Tensor tmp("x", d.dtype, {1});
        tmp.set(0, static_cast<float>(x[i]));
        c0.set(s * per_conv + i, tmp.get(0));
      }
    }
  }
  return m;
}

int64_t layer_input_bytes(const Case& c) {
  const Params d = decode(c);
  return d.T * (d.D + d.HV * d.V + 2 * d.HV) * cases::dtype_size(d.dtype) +
         2 * d.N * (d.HV * d.K * d.V + d.D * (d.W - 1)) * 4;
}

// ---- Long context (docs/cases.md#long-context) ----------------------------------------------
// The whole layer over 32K-64K tokens in full: the conv state and the recurrent state carried
// through a chunked prefill of a long sequence beside short ones (sparkinfer#1071). Seeds from
// 32000.
void long_context_suite(SuiteBuilder& b, Tier t) {
  if (t != Tier::kFull) return;
  int seed = 32000;
  auto add = [&](SuiteParams p) {
    for (auto kv : SuiteParams{{"H", "1"}, {"HV", "2"}, {"K", "16"}, {"V", "16"}}) p.push_back(kv);
    p.emplace_back("seed", std::to_string(seed++));
    b.add("layer", p);
  };
  add({{"layout", "packed[100,32768]"}, {"cache", "chunked"}});
  add({{"layout", "packed[5,0,65536]"}, {"dtype", "bf16"}});
}
// ---- end of long context ------------------------------------------------------------------

void layer_suite(SuiteBuilder& b, Tier t) {
  serving_suite(b, t);  // pools, speculative verify, one-token calls (ops/layer/serving.cc)
  int seed = 500;
  auto add = [&](SuiteParams p) {
    p.emplace_back("seed", std::to_string(seed++));
    b.add("layer", p);
  };
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  for (const auto& dt : t == Tier::kSmoke ? std::vector<std::string>{"fp32", "bf16"} : dtypes) {
    add({{"layout", "packed[63,0,65]"}, {"dtype", dt}});
    add({{"layout", "packed[1,2,3,40]"}, {"dtype", dt}, {"W", "4"}});
  }
  add({{"layout", "packed[5,70,1]"}, {"cache", "chunked"}});
  add({{"layout", "packed[9,30]"}, {"cache", "dynamic"}});
  // Appended later, with seeds of their own (from 600), so that the cases above and below keep
  // their ids. The padding-free training path: packed, no states in or out.
  int appended_seed = 600;
  auto append = [&](SuiteParams p) {
    p.emplace_back("seed", std::to_string(appended_seed++));
    b.add("layer", p);
  };
  append({{"layout", "packed[63,0,65]"}, {"cache", "none"}, {"state", "none"}});
  if (t != Tier::kSmoke) {
    // Small head dims, where a relative slip is not hidden under the ceiling.
    for (const auto& [k, v] :
         std::vector<std::pair<std::string, std::string>>{{"4", "4"}, {"8", "8"}, {"8", "2"}})
      for (const auto& dt : dtypes)
        append({{"layout", "packed[1,2,15,16]"}, {"K", k}, {"V", v}, {"dtype", dt}});
    for (const auto& kv : {"4", "8"}) {
      append({{"layout", "packed[1*6]"}, {"cache", "decode"}, {"K", kv}, {"V", kv}});
      append({{"layout", "packed[3*5,100,0]"}, {"cache", "dynamic"}, {"K", kv}, {"V", kv}});
    }
  }
  if (t == Tier::kSmoke) return;
  for (const auto& w : {"2", "3"}) add({{"layout", "packed[1,2,15,16]"}, {"W", w}});
  for (const auto& cache : {"none", "decode", "chunked", "dynamic"})
    for (const auto& dt : dtypes) {
      SuiteParams p{{"dtype", dt}, {"cache", cache}};
      p.emplace_back("layout",
                     cache == std::string("decode") ? "packed[1*6]" : "packed[3*5,100,0]");
      if (cache == std::string("none")) p.emplace_back("state", "none");
      add(p);
    }
  add({{"layout", "packed[16,64,65]"}, {"state", "mixed"}, {"bias", "0"}});
  add({{"layout", "single[129]"}, {"H", "2"}, {"HV", "8"}, {"K", "64"}, {"V", "64"}});
  if (t == Tier::kFull) {
    add({{"layout", "packed[700,1300]"}, {"K", "128"}, {"V", "128"}, {"H", "4"}, {"HV", "8"}});
    add({{"layout", "packed[1*200]"}, {"dtype", "bf16"}, {"cache", "dynamic"}, {"calls", "5"}});
  }
  long_context_suite(b, t);
}

// ---- Issue 36: the input regimes the layer takes (tinyqk, hugeqk, corrk: the conv's input
// channels placed so that the rule's q/k land there) and the head dims 64, 128 and 256 beside
// the default 32, with seeds of their own (800 on), so that every case above keeps its id.
void regime_suite(SuiteBuilder& b, Tier t) {
  if (t == Tier::kSmoke) return;
  int seed = 800;
  auto add = [&](SuiteParams p) {
    p.emplace_back("seed", std::to_string(seed++));
    b.add("layer", p);
  };
  add({{"layout", "packed[63,0,65]"}, {"regime", "tinyqk"}, {"dtype", "bf16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "hugeqk"}, {"dtype", "fp16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"dtype", "bf16"}});
  add({{"layout", "packed[15,0,65]"},
       {"K", "256"},
       {"V", "256"},
       {"H", "1"},
       {"HV", "2"},
       {"dtype", "bf16"}});
  if (t != Tier::kFull) return;
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  for (const auto& dt : dtypes) {
    add({{"layout", "packed[1,2,3,40,0,129]"}, {"regime", "tinyqk"}, {"dtype", dt}});
    add({{"layout", "packed[1,2,3,40,0,129]"}, {"regime", "hugeqk"}, {"dtype", dt}});
    add({{"layout", "packed[1,2,3,40,0,129]"}, {"regime", "corrk"}, {"dtype", dt}});
  }
  add({{"layout", "packed[5,70,1]"}, {"regime", "tinyqk"}, {"cache", "chunked"}});
  add({{"layout", "packed[9,30]"}, {"regime", "corrk"}, {"cache", "dynamic"}, {"dtype", "bf16"}});
  add({{"layout", "packed[1*6]"}, {"regime", "tinyqk"}, {"cache", "decode"}, {"dtype", "bf16"}});
  add({{"layout", "packed[16,64,65]"}, {"regime", "corrk"}, {"state", "mixed"}, {"bias", "0"}});
  add({{"layout", "packed[700,300]"},
       {"regime", "corrk"},
       {"K", "128"},
       {"V", "128"},
       {"dtype", "bf16"}});
  for (const auto& kv : {"64", "128", "256"})
    for (const auto& dt : dtypes)
      add({{"layout", "packed[63,0,65]"},
           {"K", kv},
           {"V", kv},
           {"H", "1"},
           {"HV", "2"},
           {"dtype", dt}});
  // A regime on the pools' conv rows too (place_conv_pool).
  add({{"layout", "packed[5,70,1]"}, {"regime", "tinyqk"}, {"cache", "pool"}, {"dtype", "bf16"}});
  add({{"layout", "packed[5,70,1]"}, {"regime", "corrk"}, {"cache", "pool"}, {"dtype", "bf16"}});
}

void suites(SuiteBuilder& b, Tier t) {
  layer_suite(b, t);
  regime_suite(b, t);
}

}  // namespace

Params decode(const Case& c) {
  expect_op(c, "layer");
  Params d;
  d.layout = c.layout();
  d.T = d.layout.total_tokens();
  d.N = d.layout.num_seqs();
  d.H = c.get_int("H");
  d.HV = c.get_int("HV");
  d.K = c.get_int("K");
  d.V = c.get_int("V");
  d.W = c.get_int("W");
  d.D = 2 * d.H * d.K + d.HV * d.V;
  d.bias = c.get_bool("bias");
  d.dtype = decode_dtype(c);
  d.state = decode_choice<State>(c, "state", kStateNames);
  d.cache = decode_choice<Cache>(c, "cache", kCacheNames);
  d.calls = c.get_int("calls");
  d.regime = decode_regime(c);
  d.seed = c.seed();
  return d;
}

cases::OpDefinition definition() {
  return {layer_schema(), generate_layer, layer_input_bytes, suites};
}

}  // namespace deltacheck::ops::layer
