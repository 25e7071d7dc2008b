// The layer_grad operation: schema (layer's forward parameters, less the cache modes, plus dht,
// dconv and tail), inputs (the layer generator's, a padding tail, do, dht and dconv) and suite
// entries.
#include <string>

#include "ops/decode.h"
#include "ops/grad_common.h"
#include "ops/layer_grad/params.h"
#include "ops/schema.h"

namespace deltacheck::ops::layer_grad {
namespace {

StatusOr<Case> make_forward_case(const Case& c) {
  return grad::forward_case(c, "layer_grad", "layer", {"dht", "dconv", "tail"});
}

Status check_grad(const Case& c) { return grad::check_forward_and_tail(c, make_forward_case(c)); }

// A case given over no token: the forward layer case's rule.
Status check_zero_tokens(const Case& c) {
  const StatusOr<Case> f = make_forward_case(c);
  return f.ok() ? layer::check_zero_tokens(f.value()) : Status::Ok();  // else check_grad's
}

OpSchema grad_schema() {
  return OpSchema{
      "layer_grad",
      "linear-attention layer backward: dqkv, dz, da, db, conv weight/bias, A_log, dt_bias, norm "
      "weight, initial states from do, dht and dconv; forward inputs as the layer prefill case's",
      grad::schema_params(
          layer::definition().schema,
          {choice("dht", "none", {"none", "rand"},
                  "gradient of the final recurrent state: none (zero) | rand (0.5 N(0,1))"),
           choice("dconv", "none", {"none", "rand"},
                  "gradient of the final conv state: none (zero) | rand (0.5 N(0,1))")}),
      check_grad, check_zero_tokens};
}

TensorMap generate_grad(const Case& c, const GenOptions& o) {
  const Params p = decode(c);
  const layer::Params& d = p.layer;
  TensorMap f = layer::definition().generate(forward_case(c), o);
  TensorMap m;
  const auto normal = [](const Stream& st, int64_t i) { return st.normal(i); };
  for (const Tensor& t : f.all()) {
    const bool token_major =
        t.name() == "qkv" || t.name() == "z" || t.name() == "a" || t.name() == "b";
    m.add(token_major && p.tail > 0 ? with_tail(t, p.tail, d.seed, normal) : t);
  }
  // do: N(0,1) per sequence with the sequence's salt, like qkv; the tail's unsalted.
  grad::fill_do(m.add(Tensor("do", d.dtype, {1, d.T, d.HV, d.V})), d.layout, d.seed, o, d.HV * d.V,
                p.tail);
  if (p.dht)
    grad::fill_upstream(m.add(Tensor("dht", DType::kF32, {d.N, d.HV, d.K, d.V})), d.N, d.seed, o,
                        d.HV * d.K * d.V);
  if (p.dconv)
    grad::fill_upstream(m.add(Tensor("dconv", DType::kF32, {d.N, d.D, d.W - 1})), d.N, d.seed, o,
                        d.D * (d.W - 1));
  return m;
}

int64_t grad_input_bytes(const Case& c) {
  const Params p = decode(c);
  const layer::Params& d = p.layer;
  const int64_t es = cases::dtype_size(d.dtype);
  return layer::definition().input_bytes(forward_case(c)) +
         p.tail * (d.D + d.HV * d.V + 2 * d.HV) * es + d.T * d.HV * d.V * es +
         (p.dht ? d.N * d.HV * d.K * d.V * 4 : 0) + (p.dconv ? d.N * d.D * (d.W - 1) * 4 : 0);
}

// K = V = 32 throughout (at K = V = 16 the bf16 layer is ill-conditioned: docs/gradients.md).
void grad_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  const SuiteParams base{{"state", "rand"}, {"dht", "rand"}, {"dconv", "rand"}};
  int seed = 700;
  auto add = [&](const SuiteParams& over) {
    b.add("layer_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "packed[63,0,65]"}});
  if (tier < 1) return;
  // The chunk-edge pack in every dtype; one sequence (where summed gradients have one term).
  for (const char* dt : {"bf16", "fp16"}) add({{"layout", "packed[63,0,65]"}, {"dtype", dt}});
  add({{"layout", "single[64]"}});
  // Sequences shorter than the conv's context, zero-length ones first and last, many tiny ones.
  add({{"layout", "packed[1,2,3,40]"}});
  add({{"layout", "packed[1,2,3,40]"}, {"dtype", "bf16"}});
  add({{"layout", "packed[0,1,2,15,16,0]"}});
  add({{"layout", "packed[1*12]"}, {"dtype", "fp16"}});
  // Padding tails, with and without states and upstream state gradients.
  add({{"layout", "packed[5,64,3]"}, {"tail", "70"}});
  add({{"layout", "packed[16,0]"}, {"tail", "1"}, {"state", "none"}, {"dht", "none"}});
  // Mixed states without a conv bias and a narrower conv; GVA 4; W = 2 without states.
  add({{"layout", "packed[63,0,65]"}, {"state", "mixed"}, {"bias", "0"}, {"W", "3"}});
  add({{"layout", "packed[15,64,65]"}, {"H", "1"}, {"HV", "4"}, {"dtype", "bf16"}});
  add({{"layout", "packed[127,129]"}, {"W", "2"}, {"state", "none"}, {"dconv", "none"}});
  if (tier < 2) return;
  add({{"layout", "packed[1*30,64,127,129,0,257]"}});
  add({{"layout", "packed[1*30,64,127,129,0,257]"}, {"dtype", "bf16"}});
  add({{"layout", "packed[700,2]"}, {"dtype", "fp16"}, {"tail", "17"}});
  add({{"layout", "single[129]"}, {"HV", "8"}, {"K", "64"}, {"V", "64"}});
  add({{"layout", "packed[300,0,200]"},
       {"H", "4"},
       {"HV", "8"},
       {"K", "64"},
       {"V", "64"},
       {"dtype", "bf16"}});
  add({{"layout", "packed[0,0,5,0]"}, {"state", "mixed"}});
  add({{"layout", "packed[3*5,100,0]"}, {"W", "2"}, {"dtype", "fp16"}});
}

// ---- Issue 36: the input regimes the layer takes (tinyqk, hugeqk, corrk: ops/layer/case.cc),
// with seeds of their own (800 on), so that every case above keeps its id.
void regime_suite(SuiteBuilder& b, Tier t) {
  const int tier = static_cast<int>(t);
  if (tier < 1) return;
  const SuiteParams base{{"state", "rand"}, {"dht", "rand"}, {"dconv", "rand"}};
  int seed = 800;
  auto add = [&](const SuiteParams& over) {
    b.add("layer_grad", merge(merge(base, {{"seed", std::to_string(seed++)}}), over));
  };
  add({{"layout", "packed[63,0,65]"}, {"regime", "tinyqk"}, {"dtype", "bf16"}});
  add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"dtype", "bf16"}});
  if (tier < 2) return;
  // tinyqk not in fp16: d(x / |x|)/dx ~ 1 / |x| makes dqkv reach 1.3e5 at norms of 1e-4, past
  // fp16's 65504 (the FP64 gradient itself: measured on seed 804, docs/cases.md#regimes).
  add({{"layout", "packed[63,0,65]"}, {"regime", "tinyqk"}, {"dtype", "fp32"}});
  for (const char* dt : {"fp32", "fp16"})
    add({{"layout", "packed[63,0,65]"}, {"regime", "corrk"}, {"dtype", dt}});
  for (const char* dt : {"fp32", "bf16", "fp16"})
    add({{"layout", "packed[15,64,65]"}, {"regime", "hugeqk"}, {"dtype", dt}});
  add({{"layout", "packed[5,64,3]"}, {"regime", "corrk"}, {"tail", "7"}, {"K", "64"}, {"V", "64"}});
}

void suites(SuiteBuilder& b, Tier t) {
  grad_suite(b, t);
  regime_suite(b, t);
}

}  // namespace

Case forward_case(const Case& c) { return checked(make_forward_case(c)); }

Params decode(const Case& c) {
  Params p;
  p.layer = layer::decode(forward_case(c));
  p.dht = c.get("dht") == "rand";
  p.dconv = c.get("dconv") == "rand";
  p.tail = c.get_int("tail");
  p.layer.T += p.tail;
  return p;
}

cases::OpDefinition definition() {
  return {grad_schema(), generate_grad, grad_input_bytes, suites};
}

}  // namespace deltacheck::ops::layer_grad
