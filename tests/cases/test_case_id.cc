// Case ids: canonical form, round trip, defaults, and one clear error per malformed id.
#include <gtest/gtest.h>

#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"

namespace deltacheck::cases {
namespace {

TEST(CaseId, CanonicalFormHasEveryParameterInSchemaOrder) {
  const Case c = Case::parse("gdr(seed=7, dtype=bf16,layout=packed[63,0,65],HV=4)");
  EXPECT_EQ(c.id(),
            "gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=weak,beta=rand,"
            "keys=norm,l2=1,state=rand,cache=prefill,calls=3,seed=7)");
  EXPECT_EQ(Case::parse(c.id()), c);
  EXPECT_EQ(c.get_int("HV"), 4);
  EXPECT_EQ(c.with("seed", "8").get("seed"), "8");
}

TEST(CaseId, EverySuiteCaseRoundTrips) {
  for (const auto& s : list_suites())
    for (const Case& c : suite(s.name)) ASSERT_EQ(Case::parse(c.id()).id(), c.id());
}

TEST(CaseId, LayoutsCanonicalize) {
  EXPECT_EQ(Layout::parse("packed[3,3,3,3,700,5,5]").str(), "packed[3*4,700,5,5]");
  EXPECT_EQ(Layout::parse("packed[1*2,1]").str(), "packed[1*3]");
  const Layout b = Layout::parse("batch[4x16]");
  EXPECT_EQ(b.batch(), 4);
  EXPECT_EQ(b.row_length(), 16);
  EXPECT_EQ(b.num_seqs(), 4);
  const Layout p = Layout::parse("packed[0,5,0]");
  EXPECT_EQ(p.cu_seqlens(), (std::vector<int64_t>{0, 0, 5, 5}));
}

TEST(CaseId, MalformedIdsNameTheProblem) {
  auto message = [](const std::string& id) {
    try {
      Case::parse(id);
    } catch (const CaseIdError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("gdr(H=3,HV=4)").find("HV % H"), std::string::npos);
  EXPECT_NE(message("gdr(foo=1)").find("unknown parameter 'foo'"), std::string::npos);
  EXPECT_NE(message("nope(H=1)").find("unknown operation 'nope'"), std::string::npos);
  EXPECT_NE(message("gdr(dtype=fp8)").find("not one of"), std::string::npos);
  EXPECT_NE(message("gdr(K=abc)").find("not an integer"), std::string::npos);
  EXPECT_NE(message("gdr(K=0)").find("outside"), std::string::npos);
  EXPECT_NE(message("gdr(layout=packed[1,-2])").find("not a length"), std::string::npos);
  EXPECT_NE(message("gdr(layout=packed[1,2)").find("unbalanced"), std::string::npos);
  EXPECT_NE(message("gdr(H=1,H=2)").find("given twice"), std::string::npos);
  EXPECT_NE(message("gdr").find("expected op(key=value"), std::string::npos);
  EXPECT_NE(message("gdr(cache=none)").find("takes no initial state"), std::string::npos);
}

// The same refusals as values: Case::from_id, Case::make, Layout::from_text and lookup_schema
// return InvalidArgument with exactly the message the throwing forms carry, and a value for a
// good id equal to what they return.
TEST(CaseId, ErrorsComeBackAsValuesWithTheSameMessages) {
  for (const std::string id :
       {"gdr(H=3,HV=4)", "gdr(foo=1)", "nope(H=1)", "gdr(dtype=fp8)", "gdr(K=abc)", "gdr(K=0)",
        "gdr(K=99999999999999999999999)", "gdr(layout=packed[1,-2])", "gdr(layout=packed[1,2)",
        "gdr(layout=packed[1,2]])", "gdr(H=1,H=2)", "gdr", "gdr(x)", "gdr(cache=none)",
        "gdr(seed=\x01)", "gdr(layout=tiled[4])", "gdr(layout=batch[0x4])"}) {
    SCOPED_TRACE(id);
    const StatusOr<Case> v = Case::from_id(id);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    try {
      Case::parse(id);
      ADD_FAILURE() << "parse() accepted what from_id() refused";
    } catch (const CaseIdError& e) {
      EXPECT_EQ(v.status().message(), e.what());
    }
  }
  const StatusOr<Case> good = Case::from_id("gdr(seed=7, layout=packed[3,3,3])");
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good.value(), Case::parse("gdr(layout=packed[3*3],seed=7)"));
  EXPECT_EQ(good.value().layout().str(), "packed[3*3]");

  const StatusOr<Case> made = Case::make("gdr", {{"HV", "4"}, {"H", "3"}});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("HV % H"), std::string::npos);
  ASSERT_TRUE(Case::make("gdr", {{"HV", "4"}}).ok());

  const StatusOr<Layout> bad = Layout::from_text("packed[]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "layout 'packed[]': no sequences");
  ASSERT_TRUE(Layout::from_text("packed[5,0]").ok());
  EXPECT_EQ(Layout::from_text("batch[2x3]").value().total_tokens(), 6);

  const StatusOr<const OpSchema*> schema = lookup_schema("gdr_nope");
  ASSERT_FALSE(schema.ok());
  EXPECT_NE(schema.status().message().find("unknown operation 'gdr_nope' (known: "),
            std::string::npos);
  ASSERT_TRUE(lookup_schema("mask").ok());
  EXPECT_EQ(lookup_schema("mask").value()->op, "mask");
}

TEST(Generate, SameSeedSameBitsAndSequencesIndependentOfNeighbours) {
  const Case a = Case::parse("gdr(layout=packed[5,7],dtype=bf16,seed=3)");
  const TensorMap x = generate_inputs(a), y = generate_inputs(a);
  for (const Tensor& t : x.all()) EXPECT_EQ(t.storage(), y.at(t.name()).storage()) << t.name();
  // Regenerating sequence 1 changes only its tokens.
  GenOptions o;
  o.sequence_salt[1] = 99;
  const TensorMap z = generate_inputs(a, o);
  const Tensor &q0 = x.at("q"), &q1 = z.at("q");
  const int64_t per_token = 2 * 64;
  for (int64_t i = 0; i < 5 * per_token; ++i) ASSERT_EQ(q0.get(i), q1.get(i));
  int differ = 0;
  for (int64_t i = 5 * per_token; i < 12 * per_token; ++i) differ += q0.get(i) != q1.get(i);
  EXPECT_GT(differ, 6 * per_token);
}

TEST(Generate, RegimesProduceTheirRanges) {
  const TensorMap m = generate_inputs(Case::parse("gdr(layout=single[130],gate=tail,beta=one)"));
  const Tensor& g = m.at("g");
  const int64_t HV = 2;
  for (int64_t t = 0; t < 130; ++t)
    for (int64_t h = 0; h < HV; ++h) {
      const double x = g.get(t * HV + h);
      if (t >= 128) {
        EXPECT_LE(x, -30.0);
        EXPECT_GE(x, -60.0);
      } else {
        EXPECT_LT(x, 0.0);
        EXPECT_GT(x, -0.7);
      }
    }
  for (int64_t i = 0; i < m.at("beta").numel(); ++i) EXPECT_EQ(m.at("beta").get(i), 1.0);
  EXPECT_FALSE(m.has("cu_seqlens"));
  EXPECT_TRUE(generate_inputs(Case::parse("gdr(layout=packed[2,3])")).has("cu_seqlens"));
}

}  // namespace
}  // namespace deltacheck::cases
