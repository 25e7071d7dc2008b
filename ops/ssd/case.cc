// The ssd operation: Mamba2's SSD forward. Schema, typed parameters, input generation and suite
// cases (seeds from 39000, issue 39: no other op's suite uses them).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cases/det_math.h"
#include "ops/decode.h"
#include "ops/schema.h"
#include "ops/ssd/params.h"

namespace deltacheck::ops::ssd {

double Params::dt_max() const {
  return dt_limit ? kDtLimitMax : std::numeric_limits<double>::infinity();
}

namespace {

// A layout without a token leaves only the initial state carried through: a case where that
// state is random (prefill, chunked, dynamic with state=rand), refused otherwise.
Status check_zero_tokens(const Case& c) {
  if (c.layout().total_tokens() > 0) return Status::Ok();
  const Params p = decode(c);
  if (p.cache == Cache::kNone || p.state != State::kRand)
    return invalid("layout=" + c.get("layout") +
                   " holds no token: its only output is the initial state carried through "
                   "(give cache=prefill, chunked or dynamic with state=rand)");
  return Status::Ok();
}

Status check_ssd(const Case& c) {
  if (c.get_int("H") % c.get_int("G") != 0)
    return invalid("H % G != 0 (H=" + c.get("H") + ", G=" + c.get("G") + ")");
  if (Status st = check_none_and_decode(c); !st.ok()) return st;
  if (c.get_int("calls") > 64) return invalid("calls must be <= 64 (calls=" + c.get("calls") + ")");
  return Status::Ok();
}

OpSchema ssd_schema() {
  return OpSchema{
      "ssd",
      "Mamba2 SSD (state-space duality) forward: y, final state",
      {
          {"layout", ParamSpec::Kind::kLayout, "single[256]", {}, 0, 0, "token layout"},
          integer("H", "4", 1, 1024, "heads"),
          integer("P", "16", 1, 1024, "head dim"),
          integer("G", "2", 1, 1024, "B/C groups (H % G == 0)"),
          integer("N", "16", 1, 1024, "state dim (d_state)"),
          choice("dtype", "fp32", {"fp32", "bf16", "fp16"}, "x/dt/B/C/z/y dtype"),
          choice("decay", "rand", {"rand", "weak", "strong"},
                 "A, dt: -[1,16], [1e-3,1e-1] (mamba_ssm's init) | A in -[1e-2,1e-1] | "
                 "A in -[16,64], dt in [0.5,4] (exp(dA) underflows inside a chunk)"),
          choice("dt_limit", "none", {"none", "on"},
                 "clamp of dt after the softplus: (0, inf) | (4e-3, 4e-2)"),
          integer("z", "0", 0, 1, "gate y * silu(z)"),
          integer("D", "1", 0, 1, "skip D x"),
          choice("state", "rand", {"none", "rand", "mixed"},
                 "initial state: none (zeros) | rand | mixed (alternating zero and random)"),
          choice("cache", "prefill", {"none", "prefill", "decode", "chunked", "dynamic"},
                 "none: no state in or out | prefill: initial state in, final out | decode: one "
                 "token per sequence (selective_state_update) | chunked: each sequence "
                 "prefilled in several calls | dynamic: prefill then one-token decode steps"),
          integer("calls", "3", 1, 64, "chunked: pieces per sequence; dynamic: decode steps"),
          seed_param(),
      },
      check_ssd,
      check_zero_tokens};
}

// Position of sequence s's first token in the flat [B*T] token order.
int64_t flat_begin(const Params& d, int64_t s) {
  return d.layout.kind == Layout::Kind::kBatch ? s * d.T : d.layout.cu_seqlens()[s];
}

// softplus^-1(y) = log(exp(y) - 1) = y + log(1 - exp(-y)), y > 0.
double inverse_softplus(double y) { return y + cases::det_log(1.0 - cases::det_exp(-y)); }

// log-uniform in [lo, hi].
double log_uniform(const Stream& st, uint64_t i, double lo, double hi) {
  return cases::det_exp(st.uniform(i, cases::det_log(lo), cases::det_log(hi)));
}

TensorMap generate(const Case& c, const GenOptions& o) {
  const Params d = decode(c);
  TensorMap m;
  Tensor& x = m.add(Tensor("x", d.dtype, {d.B, d.T, d.H, d.P}));
  Tensor& dt = m.add(Tensor("dt", d.dtype, {d.B, d.T, d.H}));
  Tensor& Bm = m.add(Tensor("B", d.dtype, {d.B, d.T, d.G, d.N}));
  Tensor& Cm = m.add(Tensor("C", d.dtype, {d.B, d.T, d.G, d.N}));
  Tensor* z = d.z ? &m.add(Tensor("z", d.dtype, {d.B, d.T, d.H, d.P})) : nullptr;
  // Per-head weights: one stream each, no sequence salt (they are the model's, not a sequence's).
  Tensor& A = m.add(Tensor("A", DType::kF32, {d.H}));
  Tensor& bias = m.add(Tensor("dt_bias", DType::kF32, {d.H}));
  const Stream sa(d.seed, "A"), sb(d.seed, "dt_bias");
  for (int64_t h = 0; h < d.H; ++h) {
    const auto i = static_cast<uint64_t>(h);
    const double a = d.decay == Decay::kWeak     ? sa.uniform(i, 1e-2, 1e-1)
                     : d.decay == Decay::kStrong ? sa.uniform(i, 16.0, 64.0)
                                                 : sa.uniform(i, 1.0, 16.0);
    A.set(h, static_cast<float>(-a));
    const double dt0 =
        d.decay == Decay::kStrong ? log_uniform(sb, i, 0.5, 4.0) : log_uniform(sb, i, 1e-3, 1e-1);
    bias.set(h, static_cast<float>(inverse_softplus(dt0)));
  }
  if (d.D) {
    Tensor& D = m.add(Tensor("D", DType::kF32, {d.H}));
    const Stream sd(d.seed, "D");
    for (int64_t h = 0; h < d.H; ++h) D.set(h, static_cast<float>(1.0 + 0.5 * sd.normal(h)));
  }
  for (int64_t s = 0; s < d.seqs; ++s) {
    const Stream sx = sequence_stream(d.seed, o, "x", s), sdt = sequence_stream(d.seed, o, "dt", s),
                 sB = sequence_stream(d.seed, o, "B", s), sC = sequence_stream(d.seed, o, "C", s),
                 sz = sequence_stream(d.seed, o, "z", s);
    const int64_t len = d.layout.lengths[s], base = flat_begin(d, s);
    for (int64_t i = 0; i < len * d.H * d.P; ++i) {
      x.set(base * d.H * d.P + i, static_cast<float>(sx.normal(i)));
      if (z) z->set(base * d.H * d.P + i, static_cast<float>(sz.normal(i)));
    }
    // dt around its bias: softplus(bias + 0.5 N(0,1)) spreads each head's step over ~e^{+-1}.
    for (int64_t i = 0; i < len * d.H; ++i)
      dt.set(base * d.H + i, static_cast<float>(0.5 * sdt.normal(i)));
    for (int64_t i = 0; i < len * d.G * d.N; ++i) {
      Bm.set(base * d.G * d.N + i, static_cast<float>(sB.normal(i)));
      Cm.set(base * d.G * d.N + i, static_cast<float>(sC.normal(i)));
    }
  }
  if (d.layout.has_cu_seqlens()) {
    const auto cu = d.layout.cu_seqlens();
    Tensor& t = m.add(Tensor("cu_seqlens", DType::kI64, {static_cast<int64_t>(cu.size())}));
    for (size_t i = 0; i < cu.size(); ++i) t.as<int64_t>()[i] = cu[i];
  }
  if (d.cache != Cache::kNone && d.state != State::kNone) {
    Tensor& s0 = m.add(Tensor("initial_state", DType::kF32, {d.seqs, d.H, d.P, d.N}));
    const int64_t per = d.H * d.P * d.N;
    for (int64_t s = 0; s < d.seqs; ++s) {
      const bool fresh = d.state == State::kMixed && s % 2 == 0;
      const Stream st = sequence_stream(d.seed, o, "initial_state", s);
      for (int64_t i = 0; i < per; ++i)
        s0.set(s * per + i, fresh ? 0.0f : static_cast<float>(0.5 * st.normal(i)));
    }
  }
  return m;
}

int64_t ssd_input_bytes(const Case& c) {
  const Params d = decode(c);
  const int64_t tokens = d.B * d.T, es = cases::dtype_size(d.dtype);
  return tokens * ((1 + d.z) * d.H * d.P + d.H + 2 * d.G * d.N) * es +
         2 * d.seqs * d.H * d.P * d.N * 4;
}

// One sequence per residue r of T % 256 in `residues`, a zero-length one among them.
std::string tail_pack(const std::vector<int>& residues) {
  std::string l = "packed[";
  for (size_t i = 0; i < residues.size(); ++i) {
    l += std::to_string(256 + residues[i]) + ",";
    if (i == residues.size() / 2) l += "0,";
  }
  l.back() = ']';
  return l;
}

void ssd_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  const SuiteParams base{{"H", "4"}, {"P", "16"}, {"G", "2"}, {"N", "16"}, {"state", "rand"}};
  int seed = 39000;
  auto add = [&](const SuiteParams& over) {
    b.add("ssd", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  // Chunk edges (chunk 256, and 64 inside it) with zero-length sequences, in every dtype.
  for (const auto& dt : tier == 0 ? std::vector<std::string>{"fp32"} : dtypes)
    add({{"layout", "packed[255,0,257,64]"}, {"dtype", dt}});
  add({{"layout", "packed[1*8]"}, {"cache", "decode"}});
  add({{"layout", "packed[63,0,65]"}, {"cache", "chunked"}});
  if (tier >= 1) {
    for (const auto& dt : dtypes) {
      add({{"layout", "packed[1*8]"}, {"cache", "decode"}, {"dtype", dt}});
      add({{"layout", "packed[0,300,1,129]"}, {"cache", "chunked"}, {"dtype", dt}});
      add({{"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}, {"dtype", dt}});
    }
    add({{"layout", "single[257]"}, {"cache", "none"}, {"state", "none"}});
    add({{"layout", "packed[256,0,1,2]"}, {"state", "mixed"}});
    add({{"layout", "batch[3x257]"}, {"state", "none"}});
    add({{"layout", "single[511]"}, {"cache", "chunked"}, {"calls", "5"}, {"dtype", "bf16"}});
    // Groups: G < H (4 heads a group) and G = H; the gate, no skip, the dt clamp.
    add({{"layout", "packed[100,0,257]"}, {"H", "8"}, {"G", "2"}});
    add({{"layout", "packed[100,0,257]"}, {"H", "4"}, {"G", "4"}, {"dtype", "bf16"}});
    add({{"layout", "packed[100,0,257]"}, {"H", "4"}, {"G", "1"}});
    for (const auto& dt : dtypes) add({{"layout", "packed[63,0,257]"}, {"z", "1"}, {"dtype", dt}});
    add({{"layout", "packed[63,0,257]"}, {"D", "0"}});
    add({{"layout", "packed[63,0,257]"}, {"D", "0"}, {"z", "1"}, {"dtype", "bf16"}});
    for (const auto& dt : dtypes)
      add({{"layout", "packed[63,0,257]"}, {"dt_limit", "on"}, {"dtype", dt}});
    add({{"layout", "packed[3*8,300]"}, {"dt_limit", "on"}, {"cache", "dynamic"}});
    // Decay regimes: a memory that carries across chunks, and one that underflows inside a chunk.
    for (const auto& dt : dtypes) {
      add({{"layout", "packed[255,0,513]"}, {"decay", "weak"}, {"dtype", dt}});
      add({{"layout", "packed[255,0,513]"}, {"decay", "strong"}, {"dtype", dt}});
    }
    add({{"layout", "packed[63,0,300]"}, {"decay", "strong"}, {"cache", "chunked"}});
    add({{"layout", "packed[1*8]"}, {"decay", "weak"}, {"cache", "decode"}});
    // Mamba2's head dims (P = 64, N = 128) on a short pack.
    add({{"layout", "packed[17,0,257]"},
         {"H", "4"},
         {"G", "1"},
         {"P", "64"},
         {"N", "128"},
         {"dtype", "bf16"}});
  }
  if (tier >= 2) {
    // Tail sweeps: T % 256 in 1..16 and 255..257 (a chunk and a few tokens, one short of two).
    std::vector<int> residues;
    for (int r = 1; r <= 16; ++r) residues.push_back(r);
    for (int r : {255, 256, 257}) residues.push_back(r);
    size_t i = 0;
    for (int r : residues) {
      add({{"layout", "single[" + std::to_string(256 + r) + "]"},
           {"dtype", dtypes[i % 3]},
           {"decay", i % 2 ? "strong" : "rand"}});
      ++i;
    }
    for (const auto& dt : dtypes) add({{"layout", tail_pack(residues)}, {"dtype", dt}});
    add({{"layout", tail_pack(residues)}, {"cache", "chunked"}, {"z", "1"}, {"dt_limit", "on"}});
    for (const auto& dt : dtypes)
      add({{"layout", "packed[1*16]"}, {"cache", "decode"}, {"z", "1"}, {"G", "4"}, {"dtype", dt}});
    add({{"layout", "packed[1*40,2*30,3*20]"},
         {"cache", "dynamic"},
         {"calls", "4"},
         {"state", "mixed"}});
    add({{"layout", "packed[700,0,1300]"},
         {"H", "8"},
         {"G", "1"},
         {"P", "64"},
         {"N", "128"},
         {"z", "1"}});
    add({{"layout", "packed[700,0,1300]"},
         {"H", "8"},
         {"G", "8"},
         {"P", "64"},
         {"N", "64"},
         {"dtype", "bf16"},
         {"dt_limit", "on"}});
    // Long: a sequence of 20K tokens among short ones, weak decay (the state carries through).
    add({{"layout", "packed[3*20,20000,0,2*20]"},
         {"H", "2"},
         {"G", "1"},
         {"P", "8"},
         {"N", "16"},
         {"decay", "weak"},
         {"dtype", "bf16"}});
    add({{"layout", "single[16384]"},
         {"H", "2"},
         {"G", "2"},
         {"P", "8"},
         {"N", "16"},
         {"decay", "weak"},
         {"cache", "chunked"},
         {"calls", "4"}});
  }
}

}  // namespace

Params decode(const Case& c) {
  expect_op(c, "ssd");
  Params d;
  d.layout = c.layout();
  d.B = d.layout.batch();
  d.T = d.layout.row_length();
  d.H = c.get_int("H");
  d.P = c.get_int("P");
  d.G = c.get_int("G");
  d.N = c.get_int("N");
  d.seqs = d.layout.num_seqs();
  d.dtype = decode_dtype(c);
  d.decay = decode_choice<Decay>(c, "decay", kDecayNames);
  d.dt_limit = c.get("dt_limit") == "on";
  d.z = c.get_bool("z");
  d.D = c.get_bool("D");
  d.state = decode_choice<State>(c, "state", kStateNames);
  d.cache = decode_choice<Cache>(c, "cache", kCacheNames);
  d.calls = c.get_int("calls");
  d.seed = c.seed();
  d.final_state = d.cache != Cache::kNone;
  return d;
}

cases::OpDefinition definition() { return {ssd_schema(), generate, ssd_input_bytes, ssd_suite}; }

}  // namespace deltacheck::ops::ssd
