// The gdr_grad operation: schema (gdr's forward parameters, less the cache modes, plus dht, tail
// and cp), inputs (the gdr generator's, a padding tail, do and dht) and suite entries.
#include <string>

#include "cases/det_math.h"
#include "ops/decode.h"
#include "ops/gdr_grad/context_parallel.h"
#include "ops/gdr_grad/params.h"
#include "ops/grad_common.h"
#include "ops/schema.h"

namespace deltacheck::ops::gdr_grad {
namespace {

StatusOr<Case> make_forward_case(const Case& c) {
  return grad::forward_case(c, "gdr_grad", "gdr", {"dht", "tail", "cp"});
}

Status check_grad(const Case& c) {
  const StatusOr<Case> f = make_forward_case(c);
  if (Status st = grad::check_forward_and_tail(c, f); !st.ok()) return st;
  if (!c.has("cp")) return Status::Ok();
  if (f.value().layout().kind == Layout::Kind::kBatch)
    return invalid("cp=" + c.get("cp") + " cuts one packed row: needs a packed or single " +
                   "layout, got " + c.get("layout"));
  if (c.get_int("tail") > 0) return invalid("cp and tail cannot be combined");
  if (Status st = parse_cuts(c.get("cp")).status(); !st.ok()) return st;
  return cp_split(decode(c)).status();  // each cut must fall inside a sequence
}

// A case given over no token: the forward case's rule (an initial state to carry), and then every
// gradient is zero but dh0, which equals dht.
Status check_zero_tokens(const Case& c) {
  const StatusOr<Case> f = make_forward_case(c);
  if (!f.ok() || f.value().layout().total_tokens() > 0) return Status::Ok();  // check_grad's
  if (Status st = gdr::check_zero_tokens(f.value()); !st.ok()) return st;
  if (c.get("dht") == "none")
    return invalid("layout=" + c.get("layout") +
                   " holds no token: every gradient is zero then but dh0, which equals dht "
                   "(give dht=rand)");
  return Status::Ok();
}

OpSchema grad_schema() {
  std::vector<ParamSpec> params =
      grad::schema_params(gdr::definition().schema,
                          {choice("dht", "none", {"none", "rand"},
                                  "gradient of the final state: none (zero) | rand (0.5 N(0,1))")});
  ParamSpec cp = text("cp", "0",
                      "context parallelism: the row cut at token S (cp=S: two ranks) or at "
                      "S1+S2+... (ascending: one rank more per cut) into one call per rank, state "
                      "passed forward and dh0 back (0: one call)");
  cp.absent_by_default = true;
  params.insert(params.end() - 1, std::move(cp));  // after tail, before the seed
  return OpSchema{"gdr_grad",
                  "gated delta rule backward: dq, dk, dv, dg, dbeta, dh0 (with an initial state) "
                  "from do and dht; forward inputs as the gdr prefill case's",
                  std::move(params), check_grad, check_zero_tokens};
}

TensorMap generate_grad(const Case& c, const GenOptions& o) {
  const Params p = decode(c);
  const gdr::Params& d = p.rule;
  TensorMap f = gdr::generate(forward_case(c), o);
  TensorMap m;
  const auto normal = [](const Stream& st, int64_t i) { return st.normal(i); };
  for (const Tensor& t : f.all()) {
    const bool token_major = t.name() != "cu_seqlens" && t.name() != "initial_state";
    if (!token_major || p.tail == 0) {
      m.add(t);
    } else if (t.name() == "g") {
      m.add(with_tail(t, p.tail, d.seed, [](const Stream& st, int64_t i) {
        return cases::det_log_sigmoid(st.uniform(i));
      }));
    } else if (t.name() == "beta") {
      m.add(with_tail(t, p.tail, d.seed, [](const Stream& st, int64_t i) {
        return cases::det_sigmoid(st.normal(i));
      }));
    } else {
      m.add(with_tail(t, p.tail, d.seed, normal));
    }
  }
  // do: N(0,1) per sequence with the sequence's salt, like v; the tail's unsalted.
  grad::fill_do(m.add(Tensor("do", d.dtype, {d.B, d.T, d.HV, d.V})), d.layout, d.seed, o,
                d.HV * d.V, p.tail);
  if (p.dht)
    grad::fill_upstream(m.add(Tensor("dht", DType::kF32, {d.N, d.HV, d.K, d.V})), d.N, d.seed, o,
                        d.HV * d.K * d.V);
  return m;
}

int64_t grad_input_bytes(const Case& c) {
  const Params p = decode(c);
  const gdr::Params& d = p.rule;
  const int64_t es = cases::dtype_size(d.dtype), state = d.N * d.HV * d.K * d.V * 4;
  return gdr::definition().input_bytes(forward_case(c)) +
         p.tail * (2 * d.H * d.K + d.HV * d.V + d.HV) * es + p.tail * d.HV * 4 +
         d.B * d.T * d.HV * d.V * es + (p.dht ? state : 0);
}

// Context parallelism (cp=S): the row cut inside a sequence (mid-chunk, just past a chunk edge,
// one token on a side), the state passed forward and dh0 back: 1 case in smoke, 5 in gate. No
// or weak decay mostly: under strong decay what crosses the cut has faded within a few tokens.
// Seeds of their own (200 on), so that the other entries keep theirs.
void add_context_parallel(SuiteBuilder& b, int tier, const SuiteParams& base) {
  int seed = 200;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "packed[63,0,65]"}, {"cp", "100"}, {"gate", "weak"}});
  if (tier < 1) return;
  add({{"layout", "packed[63,0,65]"}, {"cp", "100"}, {"gate", "zero"}, {"dtype", "bf16"}});
  add({{"layout", "single[130]"}, {"cp", "65"}, {"gate", "zero"}});
  add({{"layout", "packed[63,0,65]"},
       {"cp", "30"},
       {"gate", "weak"},
       {"state", "none"},
       {"dht", "none"}});
  add({{"layout", "packed[15,64,65]"}, {"cp", "40"}, {"gate", "weak"}, {"H", "1"}});
  if (tier < 2) return;
  add({{"layout", "packed[63,0,65]"}, {"cp", "100"}, {"gate", "zero"}, {"dtype", "fp16"}});
  for (const char* dt : {"bf16", "fp16"})
    add({{"layout", "single[130]"}, {"cp", "65"}, {"gate", "zero"}, {"dtype", dt}});
  add({{"layout", "packed[63,0,65]"}, {"cp", "1"}, {"gate", "weak"}});
  add({{"layout", "packed[63,0,65]"}, {"cp", "127"}, {"gate", "zero"}, {"dht", "none"}});
  add({{"layout", "packed[0,40]"}, {"cp", "20"}, {"gate", "weak"}, {"state", "mixed"}});
  add({{"layout", "packed[0,1,2,15,16,0]"}, {"cp", "10"}, {"gate", "zero"}});
  add({{"layout", "packed[63,0,65]"}, {"cp", "64"}});  // strong decay
  add({{"layout", "packed[63,0,65]"}, {"cp", "100"}, {"gate", "zero"}, {"K", "60"}, {"V", "100"}});
  add({{"layout", "packed[1500,0,3*30]"},
       {"K", "128"},
       {"V", "128"},
       {"cp", "777"},
       {"gate", "weak"},
       {"dtype", "bf16"}});
  for (const char* dt : {"fp32", "fp16"})
    add({{"layout", "packed[1*30,64,127,129,0,257]"},
         {"cp", "300"},
         {"gate", "zero"},
         {"dtype", dt}});
}

// More ranks (cp=S1+S2+...): one sequence over three ranks (the middle one holds only a middle
// piece: it starts from a passed state and hands its dh0 back), a cut in each of two sequences,
// and six ranks with two cuts in one sequence. Seeds of their own (250 on).
void add_context_parallel_ranks(SuiteBuilder& b, int tier, const SuiteParams& base) {
  if (tier < 1) return;
  int seed = 250;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "single[200]"}, {"cp", "50+120"}, {"gate", "weak"}});
  add({{"layout", "packed[63,0,65]"}, {"cp", "30+100"}, {"gate", "zero"}, {"dtype", "bf16"}});
  if (tier < 2) return;
  add({{"layout", "packed[1*30,64,127,129,0,257]"},
       {"cp", "60+150+300+400+500"},
       {"gate", "weak"}});
}

// ---- Issue 36: the input regimes (ops/regimes.h) on the backward, and the head dims 32 and 256
// beside 64 and 128, with seeds of their own (800 on). The forward inputs are the gdr
// generator's, so each regime's rules are gdr's (converged: gate=zero, state=rand).
void add_regimes(SuiteBuilder& b, int tier, const SuiteParams& base) {
  if (tier < 1) return;
  int seed = 800;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "packed[63,0,65]"},
       {"regime", "converged"},
       {"gate", "zero"},
       {"dtype", "bf16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "tinyqk"}, {"dtype", "bf16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "hugeqk"}, {"dtype", "fp16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"dtype", "bf16"}});
  add({{"layout", "packed[15,0,65]"}, {"K", "256"}, {"V", "256"}, {"HV", "2"}});
  if (tier < 2) return;
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  for (const auto& dt : dtypes) {
    add({{"layout", "packed[1,0,64,129]"},
         {"regime", "converged"},
         {"gate", "zero"},
         {"dtype", dt}});
    add({{"layout", "packed[1,0,64,129]"}, {"regime", "tinyqk"}, {"dtype", dt}});
    add({{"layout", "packed[1,0,64,129]"}, {"regime", "corrk"}, {"dtype", dt}, {"gate", "weak"}});
    add({{"layout", "packed[63,0,65]"}, {"regime", "hugeqk"}, {"dtype", dt}});
  }
  add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"gate", "zero"}, {"beta", "wide"}});
  add({{"layout", "packed[5,64,3]"}, {"regime", "tinyqk"}, {"tail", "9"}, {"dtype", "bf16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"cp", "100"}, {"gate", "zero"}});
  add({{"layout", "packed[700,0,300]"},
       {"regime", "corrk"},
       {"K", "128"},
       {"V", "128"},
       {"dtype", "bf16"},
       {"gate", "weak"}});
  for (const auto& kv : {"128", "256"})
    for (const auto& dt : dtypes)
      add({{"layout", "packed[63,0,65]"}, {"K", kv}, {"V", kv}, {"dtype", dt}, {"HV", "2"}});
}
// ---- Long context (docs/cases.md#long-context) ----------------------------------------------
// Backwards over 16K-32K tokens in full: the FP64 backward stores a state every few tokens and
// replays the rest, so its time and memory grow with T K V; small heads keep it at seconds.
// Seeds from 32000.
void long_context_suite(SuiteBuilder& b, int tier, const SuiteParams& base) {
  if (tier < 2) return;
  int seed = 32000;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr_grad", merge(merge(base, {{"seed", std::to_string(seed++)},
                                         {"H", "1"},
                                         {"HV", "2"},
                                         {"K", "16"},
                                         {"V", "16"},
                                         {"gate", "weak"}}),
                            over));
  };
  add({{"layout", "packed[3*10,16384,0,2*10]"}});
  add({{"layout", "single[32768]"}, {"dtype", "bf16"}, {"K", "32"}, {"V", "32"}});
  add({{"layout", "packed[20000,5]"}, {"dtype", "fp16"}, {"gate", "zero"}, {"tail", "9"}});
}
// ---- end of long context ------------------------------------------------------------------

void grad_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  const SuiteParams base{{"H", "2"},         {"HV", "4"},       {"K", "32"},    {"V", "32"},
                         {"gate", "strong"}, {"state", "rand"}, {"dht", "rand"}};
  int seed = 1;
  auto add = [&](const SuiteParams& over) {
    b.add("gdr_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  const std::vector<std::string> dtypes{"fp32", "bf16", "fp16"};
  // Layouts: chunk edges, zero-length sequences (first, middle, last), many tiny ones, B > 1.
  std::vector<std::string> layouts{"packed[63,0,65]", "single[64]", "batch[3x17]"};
  if (tier >= 1)
    for (const char* l : {"packed[0,1,2,15,16,0]", "packed[1*12]", "packed[64,128,0]",
                          "packed[127,129]", "batch[4x65]", "single[1]"})
      layouts.push_back(l);
  if (tier >= 2)
    for (const char* l : {"packed[1*40,300]", "packed[3*20,257,2*20]", "packed[0,0,5,0]",
                          "batch[8x33]", "packed[700,2]"})
      layouts.push_back(l);
  for (const auto& l : layouts)
    for (const auto& dt : tier == 0 ? std::vector<std::string>{"fp32"} : dtypes)
      add({{"layout", l}, {"dtype", dt}});
  // A padding tail after cu_seqlens[-1], with and without dht and an initial state.
  add({{"layout", "packed[63,0,65]"}, {"tail", "7"}});
  if (tier >= 1) {
    for (const auto& dt : dtypes)
      add({{"layout", "packed[5,64,3]"}, {"tail", "70"}, {"dtype", dt}});
    add({{"layout", "packed[16,0]"}, {"tail", "1"}, {"state", "none"}, {"dht", "none"}});
    add({{"layout", "single[33]"}, {"state", "none"}, {"dht", "none"}});
    add({{"layout", "packed[0,40]"}, {"state", "mixed"}});
  }
  add_context_parallel(b, tier, base);
  add_context_parallel_ranks(b, tier, base);
  add_regimes(b, tier, base);
  if (tier < 1) return;
  // Gate, beta and key regimes on the chunk-edge pack: strong decay is where dg by a
  // cancellation form goes wrong.
  for (const auto& g : {"zero", "weak", "strong", "tail"})
    for (const auto& dt : dtypes) add({{"layout", "packed[63,0,65]"}, {"gate", g}, {"dtype", dt}});
  for (const auto& be : {"zero", "one", "wide"}) add({{"layout", "packed[63,0,65]"}, {"beta", be}});
  add({{"layout", "packed[63,0,65]"}, {"keys", "pos"}});
  add({{"layout", "packed[63,0,65]"}, {"l2", "0"}});
  // Head dims (odd ones included) and GVA ratios.
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"64", "64"}, {"60", "100"}, {"8", "8"}, {"4", "4"}})
    for (const auto& dt : dtypes)
      add({{"layout", "packed[63,0,65]"}, {"K", k}, {"V", v}, {"dtype", dt}});
  for (const auto& [h, hv] :
       std::vector<std::pair<std::string, std::string>>{{"1", "4"}, {"2", "8"}, {"4", "4"}})
    for (const auto& dt : dtypes)
      add({{"layout", "packed[15,64,65]"}, {"H", h}, {"HV", hv}, {"dtype", dt}});
  if (tier >= 2) {
    for (const auto& g : {"weak", "strong", "tail"})
      for (const auto& dt : dtypes)
        add({{"layout", "packed[1500,0,3*30]"},
             {"K", "128"},
             {"V", "128"},
             {"gate", g},
             {"dtype", dt},
             {"tail", "17"}});
    for (int s = 100; s < 106; ++s)
      add({{"layout", "packed[1*30,64,127,129,0,257]"}, {"seed", std::to_string(s)}});
  }
  long_context_suite(b, tier, base);
}

}  // namespace

Case forward_case(const Case& c) { return checked(make_forward_case(c)); }

Params decode(const Case& c) {
  Params p;
  p.rule = gdr::decode(forward_case(c));
  p.dht = c.get("dht") == "rand";
  p.tail = c.get_int("tail");
  if (c.has("cp")) p.cp = checked(parse_cuts(c.get("cp")));
  p.rule.T += p.tail;
  return p;
}

cases::OpDefinition definition() {
  return {grad_schema(), generate_grad, grad_input_bytes, grad_suite};
}

}  // namespace deltacheck::ops::gdr_grad
