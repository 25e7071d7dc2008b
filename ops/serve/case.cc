// The serve operation's schema, typed parameters, generator (a pool of distinct tokens that the
// scenario's requests and drafts refer to by id) and suite entries.
#include <string>

#include "cases/det_math.h"
#include "ops/decode.h"
#include "ops/schema.h"
#include "ops/serve/params.h"
#include "ops/serve/scenario.h"

namespace deltacheck::ops::serve {
namespace {

Status check_serve(const Case& c) {
  if (Status st = check_heads(c); !st.ok()) return st;
  if (c.get("contract") == "serving" && (c.get_int("block") < 16 || c.get_int("block") > 2048))
    return invalid(
        "contract=serving checkpoints through cache=ckpt, whose blocks are 16..2048 "
        "tokens (block=" +
        c.get("block") + ")");
  return Status::Ok();
}

OpSchema serve_schema() {
  return OpSchema{
      "serve",
      "serving scenario: the calls a runtime makes (prefills with block checkpoints, speculative "
      "verify with random acceptance, prefix hits, lanes reused); each request against its own "
      "one-shot run",
      {
          integer("requests", "4", 1, 256, "requests, in arrival order"),
          integer("lanes", "2", 1, 64, "state slots: requests running at once"),
          integer("prompt", "40", 1, 4096, "own prompt tokens per request, in [prompt/2, prompt]"),
          integer("block", "16", 1, 4096, "checkpoint block size (tokens)"),
          integer("spec", "3", 0, 16, "draft tokens per verify call (0: one-token decode)"),
          integer("steps", "6", 1, 256, "verify calls per request"),
          choice("accept", "rand", {"rand", "all", "none"},
                 "drafts accepted per verify: uniform in 0..spec | all | none"),
          choice("prefix", "shared", {"none", "shared"},
                 "shared: a later request may start with an earlier one's first blocks (prompt "
                 "and output), resuming from its checkpoint"),
          choice("contract", "plain", {"plain", "accept", "serving"},
                 "plain: the runtime passes every state on (cache=prefill, cache=spec) | accept: "
                 "verifies resume from the accepted row themselves (cache=accept) | serving: the "
                 "kernels keep every state (cache=ckpt prefills, cache=accept verifies)"),
          integer("H", "1", 1, 64, "q/k heads"),
          integer("HV", "2", 1, 256, "value heads (HV % H == 0)"),
          integer("K", "32", 1, 512, "key head dim"),
          integer("V", "32", 1, 512, "value head dim"),
          choice("dtype", "fp32", {"fp32", "bf16", "fp16"}, "q/k/v/beta/o dtype"),
          choice("gate", "weak", {"weak", "strong"}, "g: logsigmoid(U[0,1)) | U[-20,-1e-4]"),
          seed_param(),
      },
      check_serve};
}

// The token pool: q, k [N, H, K], v [N, HV, V], g [N, HV] (fp32), beta [N, HV]; token i's values
// depend on (seed, tensor, i) only.
TensorMap generate_serve(const Case& c, const GenOptions&) {
  const Params p = decode(c);
  const int64_t n = expand(p).pool_tokens;
  TensorMap m;
  auto fill = [&](Tensor& t, auto value) {
    const Stream st(p.seed, "serve/" + t.name());
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, value(st, static_cast<uint64_t>(i)));
  };
  auto normal = [](const Stream& st, uint64_t i) { return st.normal(i); };
  fill(m.add(Tensor("q", p.dtype, {n, p.H, p.K})), normal);
  fill(m.add(Tensor("k", p.dtype, {n, p.H, p.K})), normal);
  fill(m.add(Tensor("v", p.dtype, {n, p.HV, p.V})), normal);
  const Gate gate = p.gate;
  fill(m.add(Tensor("g", DType::kF32, {n, p.HV})), [gate](const Stream& st, uint64_t i) {
    return gate == Gate::kStrong ? st.uniform(i, -20.0, -1e-4)
                                 : cases::det_log_sigmoid(st.uniform(i));
  });
  fill(m.add(Tensor("beta", p.dtype, {n, p.HV})),
       [](const Stream& st, uint64_t i) { return cases::det_sigmoid(st.normal(i)); });
  return m;
}

int64_t serve_input_bytes(const Case& c) {
  const Params p = decode(c);
  const int64_t tokens = p.requests * (p.prompt + p.steps * (1 + p.spec));
  return tokens * (2 * p.H * p.K + p.HV * p.V + 2 * p.HV) * 4 +
         (p.requests + p.lanes) * p.HV * p.K * p.V * 4;
}

void serve_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  const SuiteParams base{{"requests", "6"}, {"lanes", "3"}, {"prompt", "40"}, {"block", "16"},
                         {"spec", "3"},     {"steps", "8"}, {"seed", "1"}};
  auto add = [&](const SuiteParams& over) { b.add("serve", merge(base, over)); };
  // Smoke: shared prefixes with speculative decoding, plain decode, and one lane every request
  // reuses (each wrong:serve-* runtime fails at least one smoke scenario: the panel checks it).
  add({});
  add({{"spec", "0"}, {"steps", "12"}, {"seed", "2"}});
  add({{"requests", "8"}, {"lanes", "1"}, {"spec", "2"}, {"seed", "5"}});
  // The same runtime on the serving kernel contracts: checkpoints written by cache=ckpt prefills,
  // verifies resuming from the accepted row by cache=accept.
  add({{"contract", "serving"}, {"seed", "10"}});
  if (tier < 1) return;
  // Gate: every acceptance rule, blocks that are not a multiple of the chunk size, fp16/bf16,
  // one lane (every request reuses it), GVA and odd head dims.
  add({{"accept", "none"}, {"seed", "3"}});
  add({{"accept", "all"}, {"block", "20"}, {"seed", "4"}});
  add({{"dtype", "bf16"}, {"gate", "strong"}, {"seed", "6"}});
  add({{"dtype", "fp16"}, {"H", "2"}, {"HV", "4"}, {"K", "20"}, {"V", "12"}, {"seed", "7"}});
  add({{"prompt", "150"}, {"block", "64"}, {"spec", "4"}, {"steps", "20"}, {"seed", "8"}});
  add({{"prefix", "none"}, {"requests", "5"}, {"lanes", "2"}, {"seed", "9"}});
  add({{"contract", "serving"},
       {"requests", "8"},
       {"lanes", "1"},
       {"block", "20"},
       {"spec", "2"},
       {"seed", "13"}});
  add({{"contract", "serving"}, {"dtype", "bf16"}, {"H", "2"}, {"HV", "4"}, {"seed", "12"}});
  add({{"contract", "accept"}, {"spec", "4"}, {"block", "20"}, {"seed", "14"}});
  if (tier < 2) return;
  // Full: long prompts and many requests, blocks from 16 to 2048 tokens, real head dims.
  add({{"requests", "16"},
       {"lanes", "4"},
       {"prompt", "600"},
       {"block", "100"},
       {"steps", "40"},
       {"K", "128"},
       {"V", "128"},
       {"HV", "4"},
       {"H", "2"},
       {"seed", "20"}});
  add({{"requests", "12"},
       {"lanes", "3"},
       {"prompt", "3000"},
       {"block", "2048"},
       {"steps", "16"},
       {"K", "64"},
       {"V", "64"},
       {"seed", "21"}});
  add({{"requests", "32"},
       {"lanes", "8"},
       {"prompt", "200"},
       {"block", "16"},
       {"spec", "7"},
       {"steps", "30"},
       {"dtype", "bf16"},
       {"seed", "22"}});
  add({{"requests", "24"},
       {"lanes", "2"},
       {"prompt", "300"},
       {"block", "48"},
       {"spec", "5"},
       {"steps", "25"},
       {"gate", "strong"},
       {"dtype", "fp16"},
       {"seed", "23"}});
  add({{"contract", "serving"},
       {"requests", "16"},
       {"lanes", "4"},
       {"prompt", "600"},
       {"block", "100"},
       {"spec", "4"},
       {"steps", "30"},
       {"K", "64"},
       {"V", "64"},
       {"seed", "24"}});
}

}  // namespace

Params decode(const Case& c) {
  expect_op(c, "serve");
  Params p;
  p.requests = c.get_int("requests");
  p.lanes = c.get_int("lanes");
  p.prompt = c.get_int("prompt");
  p.block = c.get_int("block");
  p.spec = c.get_int("spec");
  p.steps = c.get_int("steps");
  p.accept = decode_choice<Accept>(c, "accept", kAcceptNames);
  p.prefix = decode_choice<Prefix>(c, "prefix", kPrefixNames);
  p.contract = decode_choice<Contract>(c, "contract", kContractNames);
  p.H = c.get_int("H");
  p.HV = c.get_int("HV");
  p.K = c.get_int("K");
  p.V = c.get_int("V");
  p.dtype = decode_dtype(c);
  p.gate = decode_choice<Gate>(c, "gate", kGateNames);
  p.seed = c.seed();
  return p;
}

cases::OpDefinition definition() {
  return {serve_schema(), generate_serve, serve_input_bytes, serve_suite};
}

}  // namespace deltacheck::ops::serve
