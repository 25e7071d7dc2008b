// The parameters every operation's case id carries, with defaults and allowed values.
#include <string>

#include "cases/case.h"

namespace deltacheck::cases {
namespace {

using K = ParamSpec::Kind;

ParamSpec choice(std::string key, std::string def, std::vector<std::string> choices,
                 std::string help) {
  return {std::move(key), K::kChoice, std::move(def), std::move(choices), 0, 0, std::move(help)};
}
ParamSpec integer(std::string key, std::string def, int64_t lo, int64_t hi, std::string help) {
  return {std::move(key), K::kInt, std::move(def), {}, lo, hi, std::move(help)};
}
ParamSpec seed_param() { return integer("seed", "0", 0, (int64_t{1} << 62), "generator seed"); }

void check_gdr(const Case& c) {
  if (c.get_int("HV") % c.get_int("H") != 0)
    throw CaseIdError("HV % H != 0 (HV=" + c.get("HV") + ", H=" + c.get("H") + ")");
  const Layout L = Layout::parse(c.get("layout"));
  if (c.get("cache") == "none" && c.get("state") != "none")
    throw CaseIdError("cache=none takes no initial state (state=" + c.get("state") + ")");
  (void)L;
}

std::vector<OpSchema> build() {
  std::vector<OpSchema> s;
  s.push_back(
      {"gdr",
       "gated delta rule prefill: o, final state",
       {
           {"layout", K::kLayout, "single[64]", {}, 0, 0, "token layout"},
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
           integer("l2", "1", 0, 1, "in-kernel L2 norm of q, k (else pre-normalized)"),
           choice("state", "rand", {"none", "rand", "mixed"},
                  "initial state: zeros | random | alternating zero and random"),
           choice("cache", "prefill", {"none", "prefill"},
                  "none: no state in or out; prefill: initial state in, final out"),
           seed_param(),
       },
       check_gdr});
  return s;
}

}  // namespace

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> schemas = build();
  return schemas;
}

}  // namespace deltacheck::cases
