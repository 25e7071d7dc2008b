// The two FP64 formulations (recurrent and chunked WY) agree to ~1e-12 on every case of the gate
// suite, at several chunk sizes: two independent derivations of the same rule.
#include <gtest/gtest.h>

#include <cmath>

#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/gdr/problem.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::harness {
namespace {

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(OracleAgreement, RecurrentAndChunkedAgreeOnTheGateSuite) {
  double worst = 0;
  std::string worst_id;
  int i = 0;
  for (const cases::Case& c : cases::suite("gate")) {
    if (c.op() != "gdr" || c.get("cache") == "pool" || c.get("cache") == "spec") continue;
    const ops::gdr::Params d = ops::gdr::decode(c);
    const cases::TensorMap in = cases::generate_inputs(c);
    const auto q = in.at("q").to_double(), k = in.at("k").to_double(), v = in.at("v").to_double(),
               g = in.at("g").to_double(), beta = in.at("beta").to_double();
    std::vector<double> s0;
    reference::GatedDeltaRuleArgs a;
    a.batch = d.B;
    a.seq_len = d.T;
    a.num_heads = d.H;
    a.num_value_heads = d.HV;
    a.key_dim = d.K;
    a.value_dim = d.V;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data();
    if (const cases::Tensor* cu = in.find("cu_seqlens"))
      a.cu_seqlens.assign(cu->as<int64_t>(), cu->as<int64_t>() + cu->numel());
    if (const cases::Tensor* t = in.find("initial_state")) {
      s0 = t->to_double();
      a.initial_state = s0.data();
    }
    a.use_qk_l2norm = d.l2;
    const auto rec = reference::gated_delta_rule(a);
    const int64_t chunk = std::vector<int64_t>{64, 16, 1, 37}[i++ % 4];
    const auto chk = reference::gated_delta_rule_chunked(a, chunk);
    const double e =
        std::max(rel_diff(chk.output, rec.output), rel_diff(chk.final_state, rec.final_state));
    EXPECT_LT(e, 1e-12) << c.id() << " chunk " << chunk;
    if (e > worst) worst = e, worst_id = c.id();
  }
  std::printf("worst relative disagreement between the FP64 formulations: %.2e (%s)\n", worst,
              worst_id.c_str());
}

}  // namespace
}  // namespace deltacheck::harness
