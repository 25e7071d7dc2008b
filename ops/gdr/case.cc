// The gdr operation: gated delta rule prefill. Schema, typed parameters, input generation and
// suite cases.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "cases/det_math.h"
#include "ops/decode.h"
#include "ops/gdr/params.h"
#include "ops/gdr/regimes.h"
#include "ops/gdr/serving.h"
#include "ops/schema.h"
#include "ops/serving_rows.h"

namespace deltacheck::ops::gdr {

// A layout that holds no token (single[0], packed[0,0], batch[Nx0]) leaves a case only the states
// it carries to check: the final state is the initial state (prefill, chunked, dynamic), the pool
// comes back as it was (pool, ckpt). Meaningful where those states are not all zeros; every other
// zero-token case given to deltacheck is refused here, before a backend could be blamed for it.
// (A pack's zero-length sequence run alone by the probes is a derived case: not checked.)
Status check_zero_tokens(const Case& c) {
  if (c.layout().total_tokens() > 0) return Status::Ok();
  const Params p = decode(c);
  const std::string what = "layout=" + c.get("layout") + " holds no token: ";
  switch (p.cache) {
    case Cache::kNone:
      return invalid(what +
                     "cache=none has no output then (cache=prefill with state=rand checks that "
                     "the final state is the initial state)");
    case Cache::kSpec:
      return invalid(what + "cache=spec needs at least one draft token per sequence (batch[Nx1])");
    case Cache::kAccept:
      return invalid(what + "cache=accept needs 1 + k >= 1 tokens per sequence (batch[Nx1])");
    case Cache::kTree:
      return invalid(what + "cache=tree needs at least one draft token per request (batch[Nx1])");
    case Cache::kPrefill:
    case Cache::kChunked:
    case Cache::kDynamic:
      // Not state=mixed either: it starts sequence 0 from zero, and the probes run sequences
      // alone (a case of its own, whose every state would be zero).
      if (p.state != State::kRand)
        return invalid(what + "its only output is the initial state carried through, " +
                       (p.state == State::kNone ? "all zeros" : "zero for sequence 0") +
                       " with state=" + c.get("state") + " (give state=rand)");
      return Status::Ok();
    default:  // decode: refused above; pool, ckpt: the pool's rows must come back unchanged
      return Status::Ok();
  }
}

namespace {

Status check_gdr(const Case& c) {
  if (Status st = check_heads(c); !st.ok()) return st;
  if (Status st = check_none_and_decode(c); !st.ok()) return st;
  const Params p = decode(c);
  if (p.cache == Cache::kSpec)
    for (int64_t l : p.layout.lengths)
      if (l != p.layout.lengths[0])
        return invalid("cache=spec needs sequences of equal length (batch[NxT]: T drafts)");
  if (p.cache != Cache::kCkpt && p.calls > 64)
    return invalid("calls must be <= 64 for cache=" + c.get("cache") + " (calls=" + c.get("calls") +
                   "; only cache=ckpt takes block sizes up to 2048)");
  if (p.serving())
    if (std::string why = check_serving(p); !why.empty()) return invalid(std::move(why));
  if (p.pooled() && p.state == State::kNone)
    return invalid("cache=" + c.get("cache") + " reads states from a pool: state must not be none");
  if (std::string why = check_regime(p); !why.empty()) return invalid(std::move(why));
  return Status::Ok();
}

ParamSpec gdr_regime_param() {
  return regime_param(
      {Regime::kRand, Regime::kConverged, Regime::kTinyQK, Regime::kHugeQK, Regime::kCorrK},
      "inputs: random | converged memory (v_t - S^T k_t = 2^-6 |v_t|; needs "
      "gate=zero, state=rand) | q/k token norms log-uniform in [1e-4, 1e-2] | "
      "in [1e2, 1e4] (both need l2=1) | keys of a sequence correlated (cosine "
      "~0.97: an ill-conditioned UT matrix)");
}

OpSchema gdr_schema() {
  return OpSchema{
      "gdr",
      "gated delta rule: o, final state (pool modes: the state pool after the call)",
      {
          {"layout", ParamSpec::Kind::kLayout, "single[64]", {}, 0, 0, "token layout"},
          integer("H", "2", 1, 1024, "q/k heads"),
          integer("HV", "2", 1, 4096, "value heads (HV % H == 0)"),
          integer("K", "64", 1, 1024, "key head dim"),
          integer("V", "64", 1, 1024, "value head dim"),
          choice("dtype", "fp32", {"fp32", "bf16", "fp16"}, "q/k/v/beta/o dtype"),
          choice("gate", "weak", {"zero", "weak", "strong", "tail"},
                 "g: 0 | logsigmoid(U[0,1)) | U[-20,-1e-4] | weak with an underflowing "
                 "tail chunk U[-60,-30]"),
          choice("beta", "rand", {"rand", "zero", "one", "wide"},
                 "beta: sigmoid(N(0,1)) | 0 | 1 | 2 sigmoid(N(0,1))"),
          choice("keys", "norm", {"norm", "pos"}, "keys N(0,1) or |N(0,1)| (ill-conditioned)"),
          gdr_regime_param(),
          integer("l2", "1", 0, 1, "in-kernel L2 norm of q, k (else pre-normalized)"),
          choice(
              "state", "rand", {"none", "rand", "mixed"},
              "initial state: none (zeros) | rand (random) | mixed (alternating zero and random)"),
          choice("cache", "prefill",
                 {"none", "prefill", "decode", "chunked", "dynamic", "pool", "spec", "ckpt",
                  "accept", "tree"},
                 "none: no state in or out | prefill: initial state in, final out | decode: one "
                 "token per sequence | chunked: each sequence prefilled in several calls | "
                 "dynamic: prefill then one-token decode steps | pool: states in a slot-addressed "
                 "pool with padding entries | spec: multi-token decode writing a state per token | "
                 "ckpt: prefill writing the state at every block boundary into per-block pool "
                 "slots | accept: speculative verify resuming from the accepted token's state "
                 "(num_accepted_tokens, state_indices) | tree: tree-shaped drafts, each token from "
                 "its parent's state (parents, state_slots, state_indices)"),
          integer("calls", "3", 1, 2048,
                  "chunked: pieces per sequence; dynamic: decode steps; pool: padding entries; "
                  "spec: draft tokens (layout batch[NxT] is then N sequences of T drafts); "
                  "ckpt: block size in tokens (16..2048; other modes: at most 64)"),
          seed_param(),
      },
      check_gdr,
      check_zero_tokens};
}

// Position of sequence s's first token in the flat [B*T] token order.
int64_t flat_begin(const Params& d, int64_t s) {
  if (d.layout.kind == Layout::Kind::kBatch) return s * d.T;
  return d.layout.cu_seqlens()[s];
}

// A stream for one tensor of one sequence, with the sequence's salt.
Stream seq_stream(const Params& d, const GenOptions& o, const std::string& tensor, int64_t s) {
  return sequence_stream(d.seed, o, tensor, s);
}

// q or k: N(0,1) (or |N(0,1)| for ill-conditioned keys); pre-normalized when the kernel is not
// asked to normalize, so the rule stays contractive; regime=tinyqk / hugeqk: each token scaled to
// its drawn norm (a stream of its own, so the directions are those of regime=rand); regime=corrk:
// each key sqrt(c) base + sqrt(1 - c) (rand's key), one base per sequence and q/k head.
void fill_qk(const GenOptions& o, const Params& d, Tensor& t, bool positive) {
  const bool l2 = d.l2, correlated = d.regime == Regime::kCorrK && t.name() == "k";
  const auto cu = d.layout.cu_seqlens();
  std::vector<double> row(static_cast<size_t>(d.K));
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream st = seq_stream(d, o, t.name(), s), sn = seq_stream(d, o, t.name() + "/norm", s),
                 sc = seq_stream(d, o, t.name() + "/corr", s);
    const int64_t len = d.layout.lengths[s], base = flat_begin(d, s);
    for (int64_t tok = 0; tok < len; ++tok)
      for (int64_t h = 0; h < d.H; ++h) {
        double ss = 0.0;
        for (int64_t i = 0; i < d.K; ++i) {
          double x = st.normal(static_cast<uint64_t>((tok * d.H + h) * d.K + i));
          if (positive) x = std::fabs(x);
          row[i] = x;
        }
        if (correlated) correlate_key(sc, static_cast<uint64_t>(h * d.K), d.K, row.data());
        for (int64_t i = 0; i < d.K; ++i) ss += row[i] * row[i];
        double inv = l2 ? 1.0 : 1.0 / std::sqrt(ss + 1e-12);
        if (const double norm = qk_token_norm(d.regime, sn, static_cast<uint64_t>(tok * d.H + h));
            norm > 0.0 && ss > 0.0)
          inv = norm / std::sqrt(ss);
        for (int64_t i = 0; i < d.K; ++i)
          t.set(((base + tok) * d.H + h) * d.K + i, static_cast<float>(row[i] * inv));
      }
  }
}

double gate_value(Gate regime, const Stream& st, uint64_t i, int64_t tok, int64_t len) {
  if (regime == Gate::kZero) return 0.0;
  if (regime == Gate::kStrong) return st.uniform(i, -20.0, -1e-4);
  if (regime == Gate::kTail) {
    const int64_t tail_begin = ((len - 1) / 64) * 64;
    if (tok >= tail_begin) return st.uniform(i, -60.0, -30.0);
  }
  return cases::det_log_sigmoid(st.uniform(i));  // weak
}

double beta_value(Beta regime, const Stream& st, uint64_t i) {
  if (regime == Beta::kZero) return 0.0;
  if (regime == Beta::kOne) return 1.0;
  const double b = cases::det_sigmoid(st.normal(i));
  return regime == Beta::kWide ? 2.0 * b : b;
}

}  // namespace

TensorMap generate(const Case& c, const GenOptions& o) {
  const Params d = decode(c);
  TensorMap m;
  Tensor& q = m.add(Tensor("q", d.dtype, {d.B, d.T, d.H, d.K}));
  Tensor& k = m.add(Tensor("k", d.dtype, {d.B, d.T, d.H, d.K}));
  Tensor& v = m.add(Tensor("v", d.dtype, {d.B, d.T, d.HV, d.V}));
  Tensor& g = m.add(Tensor("g", DType::kF32, {d.B, d.T, d.HV}));
  Tensor& beta = m.add(Tensor("beta", d.dtype, {d.B, d.T, d.HV}));
  fill_qk(o, d, q, false);
  fill_qk(o, d, k, d.keys == Keys::kPos);
  const Gate gate = d.gate;
  const Beta beta_regime = d.beta;
  for (int64_t s = 0; s < d.N; ++s) {
    const Stream sv = seq_stream(d, o, "v", s), sg = seq_stream(d, o, "g", s),
                 sb = seq_stream(d, o, "beta", s);
    const int64_t len = d.layout.lengths[s], base = flat_begin(d, s);
    for (int64_t tok = 0; tok < len; ++tok)
      for (int64_t h = 0; h < d.HV; ++h) {
        const uint64_t i = static_cast<uint64_t>(tok * d.HV + h);
        for (int64_t j = 0; j < d.V; ++j)
          v.set(((base + tok) * d.HV + h) * d.V + j,
                static_cast<float>(sv.normal(i * static_cast<uint64_t>(d.V) + j)));
        g.set((base + tok) * d.HV + h, static_cast<float>(gate_value(gate, sg, i, tok, len)));
        beta.set((base + tok) * d.HV + h, static_cast<float>(beta_value(beta_regime, sb, i)));
      }
  }
  if (d.layout.has_cu_seqlens()) {
    const auto cu = d.layout.cu_seqlens();
    Tensor& t = m.add(Tensor("cu_seqlens", DType::kI64, {static_cast<int64_t>(cu.size())}));
    for (size_t i = 0; i < cu.size(); ++i) t.as<int64_t>()[i] = cu[i];
  }
  if (d.serving()) {
    generate_serving(d, m);
    if (d.cache == Cache::kAccept || d.cache == Cache::kTree) return m;
  }
  if (d.pooled()) {
    Tensor& pool = m.add(Tensor("state_pool", DType::kF32, {pool_size(d), d.HV, d.K, d.V}));
    const Stream sp(d.seed, "state_pool");
    for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, static_cast<float>(0.5 * sp.normal(i)));
    const std::vector<int32_t> slots = pool_slots(d);
    Tensor& slot = m.add(Tensor("state_slots", DType::kI32, {d.N}));
    for (int64_t s = 0; s < d.N; ++s) slot.as<int32_t>()[s] = slots[s];
    return m;
  }
  if (d.cache != Cache::kNone && d.state != State::kNone) {
    Tensor& s0 = m.add(Tensor("initial_state", DType::kF32, {d.N, d.HV, d.K, d.V}));
    const int64_t per = d.HV * d.K * d.V;
    for (int64_t s = 0; s < d.N; ++s) {
      const bool fresh = d.state == State::kMixed && s % 2 == 0;
      const Stream st = seq_stream(d, o, "initial_state", s);
      for (int64_t i = 0; i < per; ++i)
        s0.set(s * per + i, fresh ? 0.0 : static_cast<float>(0.5 * st.normal(i)));
    }
  }
  if (d.regime == Regime::kConverged) converge_values(d, o, m);
  return m;
}

namespace {

int64_t gdr_input_bytes(const Case& c) {
  const Params d = decode(c);
  const int64_t tokens = d.B * d.T, es = cases::dtype_size(d.dtype);
  return tokens * (2 * d.H * d.K + d.HV * d.V + d.HV) * es + tokens * d.HV * 4 +
         2 * d.N * d.HV * d.K * d.V * 4;
}

// The input regimes (regimes.h), with seeds of their own (from 4000) so that every case before
// them keeps its id: converged memory (gate=zero: a decaying memory drains), tiny and huge q/k
// norms, on packed layouts with a zero-length sequence, in every dtype, with GVA.
void regime_suite(SuiteBuilder& b, Tier t, const SuiteParams& base) {
  const int tier = static_cast<int>(t);
  int seed = 4000;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  auto converged = [&](const SuiteParams& over) {
    add(merge({{"regime", "converged"}, {"gate", "zero"}}, over));
  };
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  converged({{"layout", "packed[63,0,65]"}, {"dtype", "bf16"}});
  add({{"regime", "tinyqk"}, {"layout", "packed[63,0,65]"}});
  if (tier >= 1) {
    converged({{"layout", "packed[63,0,65]"}});
    converged({{"layout", "packed[0,37,129]"}, {"dtype", "bf16"}, {"H", "1"}, {"HV", "4"}});
    converged({{"layout", "packed[15,0,64,65]"}, {"dtype", "fp16"}, {"HV", "8"}});
    converged({{"layout", "packed[63,0,65]"}, {"dtype", "bf16"}, {"cache", "chunked"}});
    for (const auto& dt : dtypes)
      add({{"regime", "tinyqk"}, {"layout", "packed[1,0,64,129]"}, {"dtype", dt}});
    add({{"regime", "tinyqk"}, {"layout", "packed[63,0,65]"}, {"dtype", "bf16"}, {"H", "1"}});
    add({{"regime", "hugeqk"}, {"layout", "packed[63,0,65]"}, {"dtype", "fp16"}});
    add({{"regime", "hugeqk"}, {"layout", "packed[63,0,65]"}, {"dtype", "bf16"}});
  }
  if (tier >= 2) {
    for (const auto& dt : dtypes)
      converged({{"layout", "packed[700,0,1300]"}, {"K", "128"}, {"V", "128"}, {"dtype", dt}});
    converged({{"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}, {"dtype", "bf16"}});
    converged({{"layout", "packed[1*16]"}, {"cache", "decode"}, {"dtype", "bf16"}});
    converged({{"layout", "packed[63,0,65]"}, {"beta", "wide"}, {"dtype", "bf16"}});
    converged({{"layout", "packed[63,0,65]"}, {"l2", "0"}, {"dtype", "fp16"}});
    for (const auto& dt : dtypes)
      add({{"regime", "tinyqk"},
           {"layout", "packed[700,0,1300]"},
           {"K", "128"},
           {"V", "128"},
           {"dtype", dt}});
    add({{"regime", "tinyqk"}, {"layout", "packed[1*12]"}, {"cache", "pool"}, {"dtype", "bf16"}});
    add({{"regime", "tinyqk"}, {"layout", "batch[6x4]"}, {"cache", "accept"}});
    add({{"regime", "hugeqk"},
         {"layout", "packed[63,0,65]"},
         {"K", "128"},
         {"V", "128"},
         {"dtype", "fp16"}});
    add({{"regime", "hugeqk"}, {"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}});
  }
}

// ---- Issue 36, regimes second part (seeds from 8000, so that every case above keeps its id):
// correlated keys (regime=corrk: an ill-conditioned UT matrix, vllm PR #53864) and the head dims
// 32 and 256 beside 64 and 128 (the cuda kernel declares K > 128 unsupported).
void regime_suite_corrk_and_head_dims(SuiteBuilder& b, Tier t, const SuiteParams& base) {
  const int tier = static_cast<int>(t);
  if (tier < 1) return;
  int seed = 8000;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  auto corrk = [&](const SuiteParams& over) { add(merge({{"regime", "corrk"}}, over)); };
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  // No or weak decay mostly: decays exp(G_i - G_j) shrink A, and with it the UT matrix's
  // condition number (the suite's base gate is strong).
  for (const auto& dt : dtypes)
    corrk({{"layout", "packed[63,0,65]"}, {"dtype", dt}, {"gate", "weak"}});
  corrk({{"layout", "packed[0,37,129]"}, {"dtype", "bf16"}, {"gate", "zero"}, {"HV", "8"}});
  corrk({{"layout", "packed[63,0,65]"}, {"dtype", "bf16"}, {"beta", "wide"}, {"gate", "zero"}});
  add({{"layout", "packed[63,0,65]"}, {"K", "32"}, {"V", "32"}, {"dtype", "bf16"}});
  add({{"layout", "packed[15,0,65]"}, {"K", "256"}, {"V", "256"}, {"dtype", "bf16"}, {"HV", "2"}});
  if (tier < 2) return;
  for (const auto& dt : dtypes)
    corrk({{"layout", "packed[700,0,1300]"},
           {"K", "128"},
           {"V", "128"},
           {"gate", "weak"},
           {"dtype", dt}});
  corrk({{"layout", "packed[63,0,65]"}, {"dtype", "fp16"}, {"gate", "zero"}, {"beta", "wide"}});
  corrk({{"layout", "packed[700]"},
         {"K", "128"},
         {"V", "128"},
         {"HV", "2"},
         {"dtype", "fp16"},
         {"gate", "zero"},
         {"beta", "wide"}});
  corrk({{"layout", "packed[63,0,65]"}, {"dtype", "bf16"}});  // strong decay
  corrk({{"layout", "packed[1,2,15,16,0,64,65]"}, {"dtype", "bf16"}, {"keys", "pos"}});
  corrk({{"layout", "packed[127,0,129]"}, {"dtype", "bf16"}, {"cache", "chunked"}});
  corrk({{"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}, {"dtype", "fp16"}});
  corrk({{"layout", "packed[1*12]"}, {"cache", "pool"}, {"dtype", "bf16"}});
  corrk({{"layout", "packed[63,0,65]"}, {"l2", "0"}, {"dtype", "bf16"}, {"gate", "zero"}});
  corrk({{"layout", "packed[63,0,65]"}, {"K", "256"}, {"V", "256"}, {"dtype", "bf16"}});
  for (const auto& kv : {"32", "256"})
    for (const auto& dt : dtypes)
      add({{"layout", "packed[700,0,300]"}, {"K", kv}, {"V", kv}, {"dtype", dt}, {"HV", "2"}});
  add({{"layout", "packed[1*8]"}, {"cache", "decode"}, {"K", "256"}, {"V", "256"}});
  add({{"layout", "packed[63,0,65]"}, {"cache", "chunked"}, {"K", "256"}, {"V", "128"}});
  add({{"regime", "tinyqk"}, {"layout", "packed[63,0,65]"}, {"K", "256"}, {"V", "64"}});
  add({{"regime", "hugeqk"}, {"layout", "packed[63,0,65]"}, {"K", "256"}, {"dtype", "fp16"}});
  add({{"regime", "converged"},
       {"gate", "zero"},
       {"layout", "packed[63,0,65]"},
       {"K", "32"},
       {"V", "32"},
       {"dtype", "bf16"}});
}

// Systematic tail sweeps (seeds from 5000): sequence lengths T = 64 + r and 128 + r for r in
// 1..16, 63, 64, 65, so T % 64 and T % 128 take every residue 1..16 and 63..65 (fla-npu#407: the
// final state wrong when the last chunk holds 1-15 tokens; sglang#29633: prompts = 1 mod 64),
// one sequence a case in rotating dtypes and gates, and packed rows whose sequences cover the
// residues. gate: a handful; full: every length.
void tail_sweeps(SuiteBuilder& b, Tier t, const SuiteParams& base) {
  const int tier = static_cast<int>(t);
  if (tier < 1) return;
  int seed = 5000;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  std::vector<int> residues;
  for (int r = 1; r <= 16; ++r) residues.push_back(r);
  for (int r : {63, 64, 65}) residues.push_back(r);
  std::vector<int> lengths;
  for (int at : {64, 128})
    for (int r : residues)
      if (std::find(lengths.begin(), lengths.end(), at + r) == lengths.end())
        lengths.push_back(at + r);
  const std::vector<int> gate_lengths{65, 69, 79, 127, 129, 141, 192};
  const char* dtypes[] = {"fp32", "bf16", "fp16"};
  const char* gates[] = {"strong", "tail", "weak"};
  size_t i = 0;
  for (int len : lengths) {
    const bool in_gate =
        std::find(gate_lengths.begin(), gate_lengths.end(), len) != gate_lengths.end();
    if (tier >= 2 || in_gate)
      add({{"layout", "single[" + std::to_string(len) + "]"},
           {"dtype", dtypes[i % 3]},
           {"gate", gates[i / 3 % 3]}});
    ++i;
  }
  auto packed = [](int at) {  // one sequence per residue, a zero-length one among them
    std::string l = "packed[";
    for (int r = 1; r <= 16; ++r) l += std::to_string(at + r) + ",";
    return l + "0," + std::to_string(at + 63) + "," + std::to_string(at + 64) + "," +
           std::to_string(at + 65) + "]";
  };
  add({{"layout", packed(64)}});
  if (tier >= 2) {
    add({{"layout", packed(64)}, {"dtype", "bf16"}, {"gate", "tail"}});
    add({{"layout", packed(128)}, {"dtype", "fp16"}});
    add({{"layout", packed(128)}, {"dtype", "bf16"}, {"gate", "tail"}, {"cache", "chunked"}});
  }
}

// ---- Long context (docs/cases.md#long-context) ----------------------------------------------
// Sequences of 32K-128K tokens in full, one of 20K and one of 8K in gate (sparkinfer#1071: a
// resumed prefill started from a zero state, and "the accuracy gates stop at 32K"). Small heads
// (H = 1, HV = 2, K = V = 16) keep a case's FP64 oracle under a second; two cases at Qwen's
// K = V = 128. Weak and zero gates, so that a state carries past a few tokens; a long sequence
// beside short ones and a zero-length one; prefill with a random initial state, chunked prefill
// (the pieces of a long sequence resume from the carried state), dynamic, ckpt. Seeds from 32000.
void long_context_suite(SuiteBuilder& b, Tier t, const SuiteParams& base) {
  const int tier = static_cast<int>(t);
  if (tier < 1) return;
  int seed = 32000;
  const SuiteParams small{{"H", "1"}, {"HV", "2"}, {"K", "16"}, {"V", "16"}, {"gate", "weak"}};
  auto add = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(merge(base, small), {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "packed[3*20,20000,0,2*20]"}, {"dtype", "bf16"}});
  add({{"layout", "single[8192]"}, {"cache", "chunked"}, {"calls", "4"}});
  if (tier < 2) return;
  const SuiteParams qwen{{"K", "128"}, {"V", "128"}};
  add({{"layout", "single[32768]"}});
  add({{"layout", "single[131072]"}});
  add({{"layout", "packed[3*20,40000,0,5*20]"}, {"dtype", "bf16"}});
  add({{"layout", "packed[1*16,65536,0,7]"}, {"dtype", "fp16"}, {"gate", "zero"}});
  add({{"layout", "packed[17,50000,33]"}, {"cache", "chunked"}});
  add({{"layout", "single[131072]"},
       {"cache", "chunked"},
       {"calls", "5"},
       {"dtype", "bf16"},
       {"gate", "zero"}});
  add({{"layout", "packed[65536,1*3]"}, {"cache", "dynamic"}, {"calls", "4"}});
  add(merge(qwen, {{"layout", "packed[32768,0,100]"}, {"dtype", "bf16"}}));
  add(merge(qwen, {{"layout", "single[40000]"}, {"HV", "1"}, {"cache", "chunked"}}));
  add({{"layout", "packed[3*20,32769,2*20]"}, {"gate", "tail"}, {"dtype", "bf16"}});
  add({{"layout", "single[131072]"}, {"gate", "strong"}, {"dtype", "fp16"}});
  add({{"layout", "packed[40000,0,5]"}, {"cache", "ckpt"}, {"calls", "2048"}});
  add({{"layout", "packed[100,0,70000]"},
       {"state", "mixed"},
       {"cache", "chunked"},
       {"calls", "7"},
       {"dtype", "fp16"}});
}
// ---- end of long context ------------------------------------------------------------------

void gdr_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  // tier 0 = smoke, 1 = gate, 2 = full
  const SuiteParams base{{"H", "2"},         {"HV", "4"},       {"K", "64"},  {"V", "64"},
                         {"gate", "strong"}, {"state", "rand"}, {"seed", "1"}};
  int seed = 1;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  std::vector<std::string> layouts = cases::layout_family("smoke");
  if (tier >= 1) layouts = cases::layout_family("gate");
  if (tier >= 2) layouts = cases::layout_family("full");
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};

  // Every layout in every dtype.
  for (const auto& l : layouts)
    for (const auto& dt : dtypes) add({{"layout", l}, {"dtype", dt}});

  // Gate, beta and key regimes on the chunk-edge pack and a single sequence.
  const std::vector<std::string> probe_layouts =
      tier == 0 ? std::vector<std::string>{"packed[63,0,65]"}
                : std::vector<std::string>{"packed[63,0,65]", "single[129]", "packed[1,2,15,16]"};
  for (const auto& l : probe_layouts) {
    for (const auto& g : {"zero", "weak", "strong", "tail"})
      for (const auto& dt : tier >= 1 ? dtypes : std::vector<std::string>{"fp32"})
        add({{"layout", l}, {"gate", g}, {"dtype", dt}});
    for (const auto& be : {"zero", "one", "wide"}) add({{"layout", l}, {"beta", be}});
    add({{"layout", l}, {"keys", "pos"}});
    add({{"layout", l}, {"keys", "pos"}, {"dtype", "bf16"}});
    add({{"layout", l}, {"l2", "0"}});
    add({{"layout", l}, {"state", "mixed"}});
    add({{"layout", l}, {"state", "none"}});
    add({{"layout", l}, {"cache", "none"}, {"state", "none"}});
  }
  // Cache modes: decode, chunked prefill, dynamic (prefill then decode), pooled states, and
  // multi-token (speculative) decode.
  for (const auto& dt : tier == 0 ? std::vector<std::string>{"fp32"} : dtypes) {
    add({{"layout", "packed[1*8]"}, {"cache", "decode"}, {"dtype", dt}});
    add({{"layout", "packed[63,0,65]"}, {"cache", "chunked"}, {"dtype", dt}});
    add({{"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}, {"dtype", dt}});
    add({{"layout", "packed[1*12]"}, {"cache", "pool"}, {"dtype", dt}});
    add({{"layout", "batch[6x3]"}, {"cache", "spec"}, {"dtype", dt}});
  }
  if (tier >= 1) {
    for (const auto& l : {"packed[1,2,15,16]", "single[129]", "packed[127,0,129]"})
      for (const auto& calls : {"2", "5"})
        add({{"layout", l}, {"cache", "chunked"}, {"calls", calls}});
    add({{"layout", "packed[1*40,2*30,3*20]"}, {"cache", "dynamic"}, {"calls", "4"}});
    add({{"layout", "packed[0,37,64]"}, {"cache", "dynamic"}, {"state", "mixed"}});
    add({{"layout", "packed[16,64,65]"}, {"cache", "pool"}, {"calls", "1"}});
    add({{"layout", "packed[1*64]"}, {"cache", "pool"}, {"calls", "8"}, {"gate", "tail"}});
    add({{"layout", "batch[16x4]"}, {"cache", "spec"}, {"K", "128"}, {"V", "128"}});
    add({{"layout", "packed[1*8]"}, {"cache", "decode"}, {"K", "100"}, {"V", "60"}});
  }
  // Head dims (incl. odd ones) and GVA ratios.
  for (const auto& kv : tier == 0 ? std::vector<std::string>{"60"}
                                  : std::vector<std::string>{"64", "128", "60", "100"})
    for (const auto& dt : tier == 0 ? std::vector<std::string>{"fp32"} : dtypes)
      add({{"layout", "packed[63,0,65]"}, {"K", kv}, {"V", kv}, {"dtype", dt}});
  add({{"layout", "packed[63,0,65]"}, {"K", "128"}, {"V", "64"}});
  for (const auto& [h, hv] : std::vector<std::pair<std::string, std::string>>{
           {"4", "4"}, {"2", "4"}, {"1", "4"}, {"2", "8"}})
    add({{"layout", "packed[15,64,65]"}, {"H", h}, {"HV", hv}});
  if (tier >= 1) {
    // Long sequences at the head dims of real models.
    add({{"layout", "packed[700,1300]"}, {"K", "128"}, {"V", "128"}, {"HV", "4"}, {"H", "2"}});
    add({{"layout", "packed[700,1300]"}, {"K", "128"}, {"V", "128"}, {"dtype", "bf16"}});
    add({{"layout", "packed[3*20,1500,5*20]"}, {"gate", "tail"}, {"dtype", "bf16"}});
  }
  if (tier >= 2) {
    for (const auto& g : {"weak", "strong", "tail"})
      for (const auto& dt : dtypes)
        add({{"layout", "packed[4100,0,3*30]"},
             {"K", "128"},
             {"V", "128"},
             {"gate", g},
             {"dtype", dt},
             {"HV", "8"}});
    for (int s = 100; s < 110; ++s)
      add({{"layout", "packed[1*30,64,127,129,0,257]"}, {"seed", std::to_string(s)}});
  }
  // The serving kernel contracts (ops/gdr/serving.h), with seeds of their own (from 2000) so
  // that every case above keeps its id: block checkpoints at block sizes that are not multiples
  // of the chunk size (64), and speculative verify with every accepted count 1..T in a batch.
  int serving_seed = 2000;
  auto serve = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(serving_seed++)}}), over));
  };
  serve({{"layout", "packed[100,0,37,256]"}, {"cache", "ckpt"}, {"calls", "48"}});
  serve({{"layout", "batch[6x4]"}, {"cache", "accept"}});
  if (tier >= 1) {
    serve({{"layout", "packed[15,16,17,200]"},
           {"cache", "ckpt"},
           {"calls", "16"},
           {"state", "mixed"}});
    serve({{"layout", "single[300]"}, {"cache", "ckpt"}, {"calls", "100"}, {"state", "none"}});
    serve({{"layout", "packed[129,64,0,1000]"}, {"cache", "ckpt"}, {"calls", "2048"}});
    serve(
        {{"layout", "packed[63,0,65,130]"}, {"cache", "ckpt"}, {"calls", "65"}, {"dtype", "bf16"}});
    serve({{"layout", "batch[3x150]"}, {"cache", "ckpt"}, {"calls", "50"}, {"dtype", "fp16"}});
    serve({{"layout", "packed[1,200]"},
           {"cache", "ckpt"},
           {"calls", "64"},
           {"K", "100"},
           {"V", "60"}});
    serve({{"layout", "batch[8x4]"}, {"cache", "accept"}, {"dtype", "bf16"}});
    serve({{"layout", "batch[8x3]"}, {"cache", "accept"}, {"dtype", "fp16"}});
    serve({{"layout", "batch[5x1]"}, {"cache", "accept"}});
    serve({{"layout", "batch[7x2]"}, {"cache", "accept"}, {"gate", "zero"}});
    serve({{"layout", "batch[10x5]"}, {"cache", "accept"}, {"K", "100"}, {"V", "60"}, {"HV", "8"}});
  }
  if (tier >= 2) {
    for (const auto& bs : {"17", "512", "2048"})
      serve({{"layout", "packed[2100,700,0,5]"},
             {"cache", "ckpt"},
             {"calls", bs},
             {"K", "128"},
             {"V", "128"}});
    for (const auto& dt : dtypes)
      serve({{"layout", "batch[32x8]"},
             {"cache", "accept"},
             {"dtype", dt},
             {"K", "128"},
             {"V", "128"}});
  }
  // Tree-shaped drafts (cache=tree), seeds from 3000: every batch holds chains, fans, stars and
  // random trees in a seeded rotation (ops/gdr/serving.h).
  int tree_seed = 3000;
  auto tree = [&](const SuiteParams& over) {
    b.add("gdr",
          merge(merge(base, {{"seed", std::to_string(tree_seed++)}, {"cache", "tree"}}), over));
  };
  tree({{"layout", "batch[4x6]"}});
  if (tier >= 1) {
    tree({{"layout", "batch[8x5]"}, {"dtype", "bf16"}});
    tree({{"layout", "batch[6x7]"}, {"dtype", "fp16"}});
    tree({{"layout", "batch[5x2]"}, {"gate", "zero"}});
    tree({{"layout", "batch[9x8]"}, {"K", "100"}, {"V", "60"}, {"HV", "8"}});
  }
  if (tier >= 2) {
    tree({{"layout", "batch[4x1]"}});  // single nodes: nothing a tree could get wrong
    for (const auto& dt : dtypes)
      tree({{"layout", "batch[16x16]"}, {"dtype", dt}, {"K", "128"}, {"V", "128"}});
    tree({{"layout", "batch[12x3]"}, {"l2", "0"}, {"gate", "weak"}});
  }
  regime_suite(b, t, base);
  regime_suite_corrk_and_head_dims(b, t, base);
  tail_sweeps(b, t, base);
  if (tier < 1) return;
  // Appended later, with seeds of their own (from 1000), so that the cases above keep their ids.
  int appended_seed = 1000;
  auto append = [&](const SuiteParams& over) {
    b.add("gdr", merge(merge(base, {{"seed", std::to_string(appended_seed++)}}), over));
  };
  // Serving decode batches (one token per sequence) on a pool with padding entries: odd head
  // dims with GVA, and many entries with many padding entries.
  append({{"layout", "packed[1*8]"},
          {"cache", "pool"},
          {"calls", "2"},
          {"K", "100"},
          {"V", "60"},
          {"HV", "8"}});
  append({{"layout", "packed[1*40]"}, {"cache", "pool"}, {"calls", "9"}, {"dtype", "bf16"}});
  // Small head dims, where the per-dtype ceiling is far above the baseline's error, so a
  // relative slip shows: prefill in every dtype, and the decode, pool and chunked paths.
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"4", "4"}, {"8", "8"}, {"8", "2"}})
    for (const auto& dt : dtypes)
      append({{"layout", "packed[63,0,65]"}, {"K", k}, {"V", v}, {"dtype", dt}});
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"4", "4"}, {"8", "8"}}) {
    append({{"layout", "packed[1*12]"}, {"cache", "pool"}, {"K", k}, {"V", v}});
    append({{"layout", "packed[1*8]"}, {"cache", "decode"}, {"K", k}, {"V", v}});
    append({{"layout", "packed[1,2,15,16]"}, {"cache", "chunked"}, {"K", k}, {"V", v}});
    append({{"layout", "batch[6x3]"}, {"cache", "spec"}, {"K", k}, {"V", v}});
    append({{"layout", "packed[3*8,300,2*8]"}, {"cache", "dynamic"}, {"K", k}, {"V", v}});
  }
  long_context_suite(b, t, base);
}

}  // namespace

Params decode(const Case& c) {
  expect_op(c, "gdr");
  Params d;
  d.layout = c.layout();
  d.B = d.layout.batch();
  d.T = d.layout.row_length();
  d.H = c.get_int("H");
  d.HV = c.get_int("HV");
  d.K = c.get_int("K");
  d.V = c.get_int("V");
  d.N = d.layout.num_seqs();
  d.dtype = decode_dtype(c);
  d.gate = decode_choice<Gate>(c, "gate", kGateNames);
  d.beta = decode_choice<Beta>(c, "beta", kBetaNames);
  d.keys = decode_choice<Keys>(c, "keys", kKeysNames);
  d.regime = decode_regime(c);
  d.l2 = c.get_bool("l2");
  d.state = decode_choice<State>(c, "state", kStateNames);
  d.cache = decode_choice<Cache>(c, "cache", kCacheNames);
  d.calls = c.get_int("calls");
  d.seed = c.seed();
  d.final_state = d.cache != Cache::kNone;
  return d;
}

int64_t pool_size(const Params& p) {
  const int64_t n = p.N;
  return n + n / 2 + 1;
}

std::vector<int32_t> pool_slots(const Params& p) {
  // Each sequence gets a distinct slot in shuffled order; for cache=pool the last `calls`
  // sequences are padding entries (slot -1); a third of the slots belong to nobody and must come
  // back bit-identical.
  const int64_t padding = p.cache == Cache::kPool ? std::min(p.calls, p.N - 1) : 0;
  return slot_table(p.N, padding, pool_size(p), p.seed);
}

bool one_token_per_sequence(const Params& p) {
  const auto& l = p.layout.lengths;
  return !l.empty() && std::all_of(l.begin(), l.end(), [](int64_t n) { return n == 1; });
}

cases::OpDefinition definition() { return {gdr_schema(), generate, gdr_input_bytes, gdr_suite}; }

}  // namespace deltacheck::ops::gdr
